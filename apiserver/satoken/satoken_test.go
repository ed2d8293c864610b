package satoken

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const iss = "https://kubernetes.default.svc"

func claims(now time.Time) Claims {
	return Claims{Issuer: iss, Subject: "system:serviceaccount:ns:sa", Audience: []string{"a", iss},
		IssuedAt: now.Unix(), NotBefore: now.Unix(), Expiry: now.Add(time.Hour).Unix(), ID: "id",
		Kubernetes: Kubernetes{Namespace: "ns", ServiceAccount: Ref{Name: "sa", UID: "u1"}, Pod: &Ref{Name: "p", UID: "u2"}}}
}

// keyAndToken loads (creating) the key at path and signs claims(now).
func keyAndToken(t *testing.T, path string, now time.Time) (*Key, string) {
	t.Helper()
	k, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := k.Sign(claims(now))
	if err != nil {
		t.Fatal(err)
	}
	return k, tok
}

func TestSignVerifyAndKeyReuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pki", "sa.key")
	now := time.Now()
	_, tok := keyAndToken(t, path, now)
	if !LooksLikeJWT(tok) {
		t.Fatalf("%q does not look like a JWT", tok)
	}
	// A second load (a restarted server) verifies the first one's tokens.
	k2, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k2.Verify(tok, iss, []string{iss}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kubernetes.Pod == nil || got.Kubernetes.Pod.UID != "u2" || got.Subject != "system:serviceaccount:ns:sa" {
		t.Fatalf("claims %+v", got)
	}
	// Another key does not.
	other, err := LoadOrCreate(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify(tok, iss, []string{iss}, now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("verified with another key: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	now := time.Now()
	k, tok := keyAndToken(t, filepath.Join(t.TempDir(), "sa.key"), now)
	parts := strings.Split(tok, ".")
	// The same signature over a payload naming another account.
	c := claims(now)
	c.Subject = "system:serviceaccount:kube-system:admin"
	p, _ := json.Marshal(c)
	tampered := parts[0] + "." + b64.EncodeToString(p) + "." + parts[2]
	none := b64.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + "."
	for _, tc := range []struct {
		name, token, issuer, aud string
		at                       time.Time
		want                     string
	}{
		{"tampered payload", tampered, iss, iss, now, "bad signature"},
		{"alg none", none, iss, iss, now, "algorithm"},
		{"two parts", parts[0] + "." + parts[1], iss, iss, now, "compact"},
		{"other issuer", tok, "https://other", iss, now, "issuer"},
		{"other audience", tok, iss, "vault", now, "audiences"},
		{"expired", tok, iss, iss, now.Add(time.Hour), "expired"},
		{"before nbf", tok, iss, iss, now.Add(-time.Minute), "not valid before"},
	} {
		_, err := k.Verify(tc.token, tc.issuer, []string{tc.aud}, tc.at)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
}
