// Package testcert makes throw-away TLS certificates for tests and the
// bench: a CA, a server certificate for the loopback addresses and a
// client certificate, written as PEM files in a folder of the caller's.
// Nothing is committed to the repository. It is imported only by tests
// and the bench.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Generate wrote.
type Files struct {
	CA string // the CA's certificate: trust it
	// ServerCert and ServerKey are for 127.0.0.1, ::1 and localhost, good
	// for client authentication too: etcd's gateway reaches its own gRPC
	// server with the member's certificate.
	ServerCert, ServerKey string
	ClientCert, ClientKey string // signed by the same CA, CN "test-client"
	// OtherCA is a second CA's certificate that signed nothing here: a
	// client trusting only it must refuse the server.
	OtherCA string
}

// Generate writes a fresh CA, server and client certificate (ECDSA P-256,
// valid for a day) into dir.
func Generate(dir string) (Files, error) {
	f := Files{
		CA: filepath.Join(dir, "ca.pem"), ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"),
	}
	now := time.Now()
	caKey, caCert, err := selfSigned("leasectl test CA", now)
	if err != nil {
		return f, err
	}
	_, other, err := selfSigned("leasectl other CA", now)
	if err != nil {
		return f, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "test-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := writeSigned(server, caCert, caKey, now, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	if err := writeSigned(client, caCert, caKey, now, f.ClientCert, f.ClientKey); err != nil {
		return f, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caCert.Raw); err != nil {
		return f, err
	}
	return f, writePEM(f.OtherCA, "CERTIFICATE", other.Raw)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

// selfSigned makes a CA.
func selfSigned(name string, now time.Time) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

// writeSigned signs tmpl with the CA and writes it and its new key.
func writeSigned(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", keyDER)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
