package registry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles name the registry's certificate and key (PEM), and optionally
// the CA whose certificates clients must present.
type TLSFiles struct {
	Cert, Key string
	// ClientCA, when set, makes every client present a certificate that
	// this CA signed, besides its bearer token (which still gives its role).
	ClientCA string
}

// TLS is the registry's TLS configuration, loaded from TLSFiles and
// reloaded (a certificate renewed, a client CA rotated) without a restart.
type TLS struct {
	files TLSFiles
	cur   atomic.Pointer[tls.Config]
}

// LoadTLS loads files; errors name the file at fault.
func LoadTLS(files TLSFiles) (*TLS, error) {
	t := &TLS{files: files}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the files again; on an error the configuration in use is
// kept. New connections get the new configuration.
func (t *TLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(t.files.Cert, t.files.Key)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", t.files.Cert, t.files.Key, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if t.files.ClientCA != "" {
		pem, err := os.ReadFile(t.files.ClientCA)
		if err != nil {
			return fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client CA %s: no PEM certificate in it", t.files.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	t.cur.Store(cfg)
	return nil
}

// serverConfig is the configuration a listener uses: each handshake gets
// the configuration loaded last.
func (t *TLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load(), nil
		},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cfg := t.cur.Load()
			if len(cfg.Certificates) == 0 {
				return nil, errors.New("no certificate loaded")
			}
			return &cfg.Certificates[0], nil
		},
	}
}
