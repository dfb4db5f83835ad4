package main

import (
	"crypto/sha512"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// saramaSCRAM is sarama's SCRAM client on xdg-go/scram, as sarama's own
// examples write it: sarama has the exchange, not the mechanism.
type saramaSCRAM struct {
	conv *scram.ClientConversation
}

func (s *saramaSCRAM) Begin(user, pass, authz string) error {
	cl, err := scram.HashGeneratorFcn(sha512.New).NewClient(user, pass, authz)
	if err != nil {
		return err
	}
	s.conv = cl.NewConversation()
	return nil
}

func (s *saramaSCRAM) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *saramaSCRAM) Done() bool { return s.conv.Done() }

// saramaRoundTrip produces 20 records with sarama's SyncProducer and
// reads them back from every partition with its consumer.
func saramaRoundTrip(t *testing.T, addr, topic string, cfg *sarama.Config) {
	t.Helper()
	cfg.Version = sarama.V3_0_0_0
	cfg.ClientID = "sarama-secure"
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.DialTimeout = 10 * time.Second
	p, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	for i := range 20 {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("sarama%d", i))}); err != nil {
			t.Fatalf("sarama produce: %v", err)
		}
	}
	p.Close()
	c, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		t.Fatalf("sarama consumer: %v", err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.After(30 * time.Second)
	for _, part := range parts {
		pc, err := c.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		hw := pc.HighWaterMarkOffset()
		for n := int64(0); n < hw; n++ {
			select {
			case m := <-pc.Messages():
				got = append(got, string(m.Value))
			case err := <-pc.Errors():
				t.Fatalf("sarama consume: %v", err)
			case <-deadline:
				t.Fatalf("sarama read %d records in 30s", len(got))
			}
		}
		pc.Close()
	}
	sort.Strings(got)
	if len(got) != 20 {
		t.Fatalf("sarama read %d records, want 20: %v", len(got), got)
	}
}

// testSarama is TestSecureClients' sarama part: SASL_SSL with
// SCRAM-SHA-512, and SSL with the client certificate.
func testSarama(t *testing.T, s *secureNode) {
	scramCfg := sarama.NewConfig()
	scramCfg.Net.TLS.Enable = true
	scramCfg.Net.TLS.Config = s.clientTLS(t, false)
	scramCfg.Net.SASL.Enable = true
	scramCfg.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
	scramCfg.Net.SASL.User, scramCfg.Net.SASL.Password = secureAdmin, securePass
	scramCfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{} }
	s.createTopic(t, "secure-sarama-scram")
	saramaRoundTrip(t, s.scram, "secure-sarama-scram", scramCfg)

	mtlsCfg := sarama.NewConfig()
	mtlsCfg.Net.TLS.Enable = true
	mtlsCfg.Net.TLS.Config = s.clientTLS(t, true)
	s.createTopic(t, "secure-sarama-mtls")
	saramaRoundTrip(t, s.mtls, "secure-sarama-mtls", mtlsCfg)
}
