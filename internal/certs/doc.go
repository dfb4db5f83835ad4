// Package certs owns the node's TLS material: loading the certificate,
// key and cluster CA files into crypto/tls configurations that reload the
// files when they change (so certificates rotate without a restart), the
// client-authentication modes of --tls-client-auth, the mapping from a
// client certificate to a Kafka principal, and the development CA and
// node certificates of strata dev --secure.
//
// It imports nothing of Strata's: broker, meta and cmd take the
// *tls.Config values it builds.
package certs
