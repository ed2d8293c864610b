package apiserver

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// FuzzDecodeAndValidate sends arbitrary request bodies, as JSON, YAML or
// protobuf, down the path a create or update takes for every served kind:
// decoding, defaulting, the create preparation and the create, update and
// status validations. Nothing may panic; a refused body must be a 4xx
// status error; validation must be deterministic (a client retrying the
// same object must get the same answer).
func FuzzDecodeAndValidate(f *testing.F) {
	resources := newResources(nil)
	seeds := []string{
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},"spec":{"type":"NodePort","ports":[{"port":80,"targetPort":8080,"nodePort":30080}],"selector":{"app":"web"}}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x","ports":[{"containerPort":80}]}]}}`,
		`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s"},"addressType":"IPv4","endpoints":[{"addresses":["10.244.1.5"],"conditions":{"ready":true}}],"ports":[{"port":80}]}`,
		`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","annotations":{"flannel.alpha.coreos.com/public-ip":"172.30.0.2"}},"spec":{"podCIDR":"10.244.1.0/24"}}`,
		`{"metadata":{"name":"x","labels":{"a":"b"},"finalizers":["kubernetes"]}}`,
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n",
		`{"spec":{"ports":[{"port":-1}],"clusterIPs":["10.96.0.1","fd00::1","x"]}}`,
	}
	for i := range resources {
		for ct := range 3 {
			for _, s := range seeds {
				f.Add(uint8(i), uint8(ct), []byte(s))
			}
		}
	}
	var s Server
	f.Fuzz(func(t *testing.T, kind, contentType uint8, body []byte) {
		res := resources[int(kind)%len(resources)]
		req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		req.Header.Set("Content-Type", []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}[contentType%3])
		obj, err := s.decodeObject(httptest.NewRecorder(), req, res)
		if err != nil {
			if code := apierrors.ReasonForError(err); code == "" || statusCode(err) < 400 || statusCode(err) >= 500 {
				t.Fatalf("%s: refusal is not a 4xx status: %v", res.kind, err)
			}
			return
		}
		if res.defaults != nil {
			res.defaults(obj)
		}
		if res.prepareCreate != nil {
			res.prepareCreate(obj)
		}
		old := obj.DeepCopyObject()
		validations := map[string]func() string{}
		if res.validate != nil {
			validations["create"] = func() string { return fmt.Sprintf("%v", res.validate(obj)) }
		}
		if res.validateUpd != nil {
			validations["update"] = func() string { return fmt.Sprintf("%v", res.validateUpd(obj, old)) }
		}
		if res.validateStat != nil {
			validations["status"] = func() string { return fmt.Sprintf("%v", res.validateStat(obj, old)) }
		}
		for name, v := range validations {
			first, second := v(), v()
			if first != second {
				t.Fatalf("%s %s validation is not deterministic:\n%s\n%s", res.kind, name, first, second)
			}
		}
		if res.fieldSet != nil {
			res.fieldSet(res.in(obj)) // field sets read the stored form
		}
		if !reflect.DeepEqual(obj, obj.DeepCopyObject()) {
			t.Fatalf("%s: a decoded object is not equal to its deep copy", res.kind)
		}
	})
}

func statusCode(err error) int {
	if st, ok := err.(apierrors.APIStatus); ok {
		return int(st.Status().Code)
	}
	return 0
}

// FuzzTokenFile holds the --token-auth-file parser (kube's CSV format,
// written by people) to: no panic, and every token it accepts
// authenticates as the user of its line, in system:authenticated.
func FuzzTokenFile(f *testing.F) {
	f.Add([]byte("s3cret,admin,admin,\"system:masters\"\n"))
	f.Add([]byte("# comment\nt1,alice,1\nt2,bob,2,\"a,b\"\n"))
	f.Add([]byte("t1,,1\n"))
	f.Add([]byte("\"unterminated,x,y\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(t.TempDir(), "tokens.csv")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		a, _, err := loadTokens(path, "")
		if err != nil {
			return
		}
		for token, u := range a.tokens {
			got, ok := a.lookup(token)
			if !ok || got.Name != u.Name || !slices.Contains(got.Groups, "system:authenticated") {
				t.Fatalf("token of %q authenticates as %+v (%v)", u.Name, got, ok)
			}
		}
	})
}
