package certs

import "crypto/x509"

// Principal is the Kafka principal of a client that presented cert on an
// SSL listener: "User:" followed by the certificate's subject as an RFC
// 2253 distinguished name, most specific attribute first, e.g.
// "User:CN=alice,OU=eng,O=acme".
//
// This is Kafka's ssl.principal.mapping.rules=DEFAULT: the whole subject,
// unmapped. Its form is Go's pkix.Name.String(), which follows RFC 2253
// (attributes in reverse of their order in the certificate, with commas,
// plus signs and the like escaped with a backslash), as the JDK's
// X500Principal.getName() does for the common attribute types (CN, OU,
// O, L, ST, C, STREET, POSTALCODE, SERIALNUMBER); attribute types Go does
// not name appear as dotted OIDs with the value hex-encoded.
func Principal(cert *x509.Certificate) string {
	return "User:" + cert.Subject.String()
}
