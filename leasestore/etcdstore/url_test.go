package etcdstore

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

func TestOpenURL(t *testing.T) {
	t.Setenv(EnvUser, "")
	t.Setenv(EnvPassword, "")
	for _, tc := range []struct {
		url       string
		endpoints []string
		user      string
	}{
		{"etcd://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}, ""},
		{"etcd://a:1,b,c:3", []string{"http://a:1", "http://b:2379", "http://c:3"}, ""},
		{"etcds://alice:pw@e1.example:2379,e2.example:2379", []string{"https://e1.example:2379", "https://e2.example:2379"}, "alice"},
		{"etcds://e1?ca=/ca.pem&cert=/c.pem&key=/k.pem", []string{"https://e1:2379"}, ""},
		{"etcd://[::1]:2379/", []string{"http://[::1]:2379"}, ""},
	} {
		s, err := Open(tc.url, "ns")
		if err != nil {
			t.Errorf("Open(%s): %v", tc.url, err)
			continue
		}
		if strings.Join(s.c.endpoints.Names(), " ") != strings.Join(tc.endpoints, " ") || s.c.user != tc.user {
			t.Errorf("Open(%s): endpoints %v user %q, want %v %q", tc.url, s.c.endpoints.Names(), s.c.user, tc.endpoints, tc.user)
		}
	}
}

func TestOpenRefusesBadURLsWithoutThePassword(t *testing.T) {
	const password = "s3cret-Pa55"
	for _, url := range []string{
		"etcd://",
		"etcd://u:" + password + "@h:2379/some/path",
		"etcd://u:" + password + "@h:2379?dial_timeout=1s",
		"etcd://u:" + password + "@h:2379?ca=/ca.pem",
		"etcds://u:" + password + "@h:2379?cert=/c.pem",
		"etcd://:" + password + "@h:2379",
		"etcd://u:" + password + "@:2379",
	} {
		_, err := Open(url, "ns")
		var ue *leasestore.URLError
		if !errors.As(err, &ue) {
			t.Errorf("Open(%s) = %v, want a *URLError", leasestore.Redact(url), err)
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("Open error %q reveals the password", err)
		}
	}
}

func TestOpenTakesCredentialsFromTheEnvironment(t *testing.T) {
	t.Setenv(EnvUser, "bob")
	t.Setenv(EnvPassword, "env-Pa55")
	t.Setenv(EnvCA, "/etc/ssl/etcd-ca.pem")
	s, err := Open("etcds://h:2379", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if s.c.user != "bob" || s.c.password != "env-Pa55" || s.password != "env-Pa55" {
		t.Errorf("user %q password %q: want bob's from %s and %s", s.c.user, s.c.password, EnvUser, EnvPassword)
	}
	if tr := s.c.hc.Transport.(*http.Transport); tr.TLSClientConfig == nil || tr.TLSClientConfig.VerifyConnection == nil {
		t.Errorf("TLS config %+v: want the members verified against the CA from %s", tr.TLSClientConfig, EnvCA)
	}
	s, err = Open("etcds://carol:url-Pa55@h:2379", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if s.c.user != "carol" || s.c.password != "url-Pa55" {
		t.Errorf("user %q password %q: the URL's credentials must win over the environment", s.c.user, s.c.password)
	}
}
