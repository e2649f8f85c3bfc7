package registry

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// openAPIFile is the API's description, shipped in docs/.
const openAPIFile = "../docs/registry-openapi.yaml"

type openAPIDoc struct {
	Paths      map[string]map[string]openAPIOperation `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]struct {
				Enum []string `yaml:"enum"`
			} `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

type openAPIOperation struct {
	Role     string           `yaml:"x-leasectl-role"`
	Security []map[string]any `yaml:"security"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	raw, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	return doc
}

// wildcard is a path template's {name} or a ServeMux pattern's {name...}.
var wildcard = regexp.MustCompile(`\{(\w+)(\.\.\.)?\}`)

// Every route the registry serves is in the document with its method and
// role, and every operation the document lists is served.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	served := map[string]route{}
	for _, rt := range routes() {
		served[rt.method+" "+wildcard.ReplaceAllString(rt.path, "{$1}")] = rt
	}
	documented := map[string]openAPIOperation{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented[strings.ToUpper(method)+" "+path] = op
		}
	}
	for key, rt := range served {
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s (%s) is not in %s", key, rt.name, openAPIFile)
			continue
		}
		wantRole := ""
		if rt.role > 0 {
			wantRole = rt.role.String()
		}
		if op.Role != wantRole {
			t.Errorf("%s: the document says role %q, the route needs %q", key, op.Role, wantRole)
		}
		if rt.role == 0 && (op.Security == nil || len(op.Security) != 0) {
			t.Errorf("%s needs no token, but the document does not say security: []", key)
		}
	}
	for key := range documented {
		if _, ok := served[key]; !ok {
			t.Errorf("%s documents %s, which the registry does not serve", openAPIFile, key)
		}
	}
}

// Every operation of the document reaches its handler: neither 404 nor 405.
func TestOpenAPIOperationsAreServed(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	params := strings.NewReplacer("{job_id}", "some/job", "{subscription_id}", "0123456789abcdef", "{watch_id}", "0123456789abcdef")
	for path, ops := range loadOpenAPI(t).Paths {
		for method := range ops {
			a := request(t, srv.url, strings.ToUpper(method), params.Replace(path)+"?timeout_ms=1", operatorToken, "{}")
			var eb api.ErrorBody
			_ = json.Unmarshal(a.body, &eb)
			if a.status == http.StatusMethodNotAllowed || eb.Error != nil && eb.Error.Code == api.CodeNotFound {
				t.Errorf("%s %s: %d %s, want it served", method, path, a.status, a.body)
			}
		}
	}
}

// The document's error codes are the registry's, and each schema named
// after a wire type lists the fields that type sends.
func TestOpenAPISchemasMatchTheWire(t *testing.T) {
	doc := loadOpenAPI(t)
	codes := doc.Components.Schemas["Error"].Properties["code"].Enum
	if want := api.Codes(); !slices.Equal(sorted(codes), sorted(want)) {
		t.Errorf("error codes in the document %v, in package api %v", codes, want)
	}
	for name, v := range map[string]any{
		"AcquireRequest": api.AcquireRequest{}, "Lease": api.Lease{}, "HeartbeatRequest": api.HeartbeatRequest{},
		"Heartbeat": api.Heartbeat{}, "CompleteRequest": api.CompleteRequest{}, "ReleaseRequest": api.ReleaseRequest{},
		"Success": api.Success{}, "JobStatus": api.JobStatus{}, "Holder": api.Holder{}, "Crash": api.Crash{},
		"Quarantine": api.Quarantine{}, "LastOutcome": api.LastOutcome{}, "Event": api.Event{}, "ScanResult": api.ScanResult{},
		"Leases": api.Leases{}, "QuarantinedJobs": api.QuarantinedJobs{}, "Counts": api.Counts{}, "NoteRequest": api.NoteRequest{},
		"TokenCheck": api.TokenCheck{}, "SubscribeRequest": api.SubscribeRequest{}, "Subscription": api.Subscription{},
		"Wait": api.Wait{}, "ErrorBody": api.ErrorBody{}, "HeldBy": api.HeldBy{}, "Error": api.Error{},
		"TokenWatchRequest": api.TokenWatchRequest{}, "TokenState": api.TokenState{}, "TokenWatch": api.TokenWatch{},
		"TokenStates": api.TokenStates{}, "TokenSyncRequest": api.TokenSyncRequest{}, "TokenSync": api.TokenSync{},
		"TokenWatchSeq": api.TokenWatchSeq{}, "RecordLateRequest": api.RecordLateRequest{}, "Correction": api.Correction{},
		"Expectation": api.Expectation{}, "ExpectRequest": api.ExpectRequest{}, "Overdue": api.Overdue{},
		"OverdueJobs": api.OverdueJobs{}, "Notice": leasestore.Notice{}, "PutNoticesRequest": api.PutNoticesRequest{},
		"ClaimNoticesRequest": api.ClaimNoticesRequest{}, "NoticeList": api.NoticeList{}, "SettleNoticeRequest": api.SettleNoticeRequest{},
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s in the document", name)
			continue
		}
		var documented []string
		for p := range schema.Properties {
			documented = append(documented, p)
		}
		if got, want := sorted(documented), jsonFields(reflect.TypeOf(v)); !slices.Equal(got, want) {
			t.Errorf("schema %s has properties %v; api.%s sends %v", name, got, name, want)
		}
	}
}

// jsonFields are the JSON keys of struct type t.
func jsonFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
