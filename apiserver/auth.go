package apiserver

import (
	"context"
	"crypto/subtle"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodenet/nodenet/apiserver/pki"
	"github.com/nodenet/nodenet/apiserver/satoken"
)

// user is an authenticated caller.
type user struct {
	Name   string
	UID    string
	Groups []string
	// Extra is what kube-apiserver attaches to a service account token's
	// user (pod name and UID, credential ID); SelfSubjectReview shows it.
	Extra map[string][]string
}

// tokenAuth checks bearer tokens against a kube-style token file. What an
// authenticated user may do is the authorizer's call (authz.go).
type tokenAuth struct {
	tokens map[string]user
}

// loadTokens reads file (or defaultFile, created with an admin token when it
// does not exist). It returns the admin token when it created or found one
// for user "admin", so the caller can write a kubeconfig.
func loadTokens(file, defaultFile string) (*tokenAuth, string, error) {
	path := file
	if path == "" {
		path = defaultFile
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			line := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", pki.NewToken())
			if err := pki.WriteFileAtomic(path, []byte(line), 0o600); err != nil {
				return nil, "", fmt.Errorf("create token file: %w", err)
			}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("open token file: %w", err)
	}
	defer f.Close()
	rd := csv.NewReader(f)
	rd.FieldsPerRecord = -1
	rd.Comment = '#'
	recs, err := rd.ReadAll()
	if err != nil {
		return nil, "", fmt.Errorf("parse token file %s: %w", path, err)
	}
	a := &tokenAuth{tokens: map[string]user{}}
	admin := ""
	for i, rec := range recs {
		if len(rec) < 3 || rec[0] == "" || rec[1] == "" {
			return nil, "", fmt.Errorf("token file %s line %d: want token,user,uid[,groups]", path, i+1)
		}
		u := user{Name: rec[1], UID: rec[2]}
		if len(rec) > 3 && rec[3] != "" {
			u.Groups = strings.Split(rec[3], ",")
		}
		// As kube-apiserver's authenticator chain does for every user.
		if !slices.Contains(u.Groups, "system:authenticated") {
			u.Groups = append(u.Groups, "system:authenticated")
		}
		a.tokens[rec[0]] = u
		if u.Name == "admin" && admin == "" {
			admin = rec[0]
		}
	}
	if len(a.tokens) == 0 {
		return nil, "", fmt.Errorf("token file %s has no tokens", path)
	}
	return a, admin, nil
}

func (a *tokenAuth) lookup(token string) (user, bool) {
	for t, u := range a.tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			return u, true
		}
	}
	return user{}, false
}

// anonymousPaths may be read without a token, as with kube-apiserver's
// default RBAC for system:unauthenticated.
var anonymousPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true, "/version": true}

type userKey struct{}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if anonymousPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		token = strings.TrimSpace(token)
		u, found := s.auth.lookup(token)
		if ok && !found && satoken.LooksLikeJWT(token) {
			var err error
			if u, err = s.serviceAccountUser(token); err != nil {
				// Why is worth a debug line: the client only sees 401.
				s.log.Debug("service account token refused", "err", err)
			}
			found = err == nil
		}
		if !ok || !found {
			s.fail(w, r, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}
