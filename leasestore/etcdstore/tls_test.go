package etcdstore

import (
	"testing"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestEtcdTLS runs a member that serves TLS and requires client
// certificates: an etcds:// URL with the CA, certificate and key works; a
// wrong CA or no certificate is refused as unavailable.
func TestEtcdTLS(t *testing.T) {
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := certs.ClientCert, certs.ClientKey
	c, err := etcdtest.Start(etcdtest.Options{TLS: &etcdtest.TLS{
		CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CA,
		ClientCertFile: clientCert, ClientKeyFile: clientKey,
	}})
	c = testserver.Own(t, c, err)
	base := "etcds://" + c.Endpoints()

	t.Run("CA, certificate and key in the URL", func(t *testing.T) {
		s := openEtcd(t, base+"?ca="+certs.CA+"&cert="+clientCert+"&key="+clientKey, freshNamespace())
		l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
		storetest.Release(t, s, l, leasestore.ResultCompleted)
	})
	t.Run("files from the environment", func(t *testing.T) {
		t.Setenv(EnvCA, certs.CA)
		t.Setenv(EnvCert, clientCert)
		t.Setenv(EnvKey, clientKey)
		s := openEtcd(t, base, freshNamespace())
		storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	})
	t.Run("members not signed by the CA", func(t *testing.T) {
		s := openEtcd(t, base+"?ca="+certs.OtherCA+"&cert="+clientCert+"&key="+clientKey, freshNamespace())
		_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "the certificate of etcd at "+c.Endpoints()+" is not trusted")
	})
	t.Run("no client certificate", func(t *testing.T) {
		s := openEtcd(t, base+"?ca="+certs.CA, freshNamespace())
		_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "refused the TLS handshake")
	})
}
