package apiserver

// Service account tokens, as kube-apiserver issues them: POST
// serviceaccounts/<name>/token (an authentication.k8s.io/v1 TokenRequest)
// answers with a JWT signed by the key in DataDir/pki/sa.key
// (apiserver/satoken), and the authenticator accepts such tokens besides
// the token file's. A token is only as alive as what it names: the service
// account (and the pod it is bound to) must still exist with the same UID,
// which is checked against the watch cache, not etcd, on every request.
//
// Left out: kube-apiserver's extended expiration for kubelet-style
// requests (3607 s bound to a pod, turned into a year with a warning when
// the token is used late) — the node agent refreshes its tokens, so a
// token lives as long as asked, capped at maxTokenExpiration; and binding
// to Secrets or Nodes, which this server does not serve or does not let
// tokens die with.

import (
	"context"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodenet/nodenet/apiserver/satoken"
	"github.com/nodenet/nodenet/apiserver/storage"
)

const (
	// serviceAccountIssuer is the tokens' iss and the audience the server
	// accepts (kube-apiserver's --service-account-issuer and
	// --api-audiences default to it in kubeadm clusters).
	serviceAccountIssuer = "https://kubernetes.default.svc"
	// Token lifetimes, as kube-apiserver: 1 h unless asked, at least
	// 10 min, at most 2^32 s requested; granted at most a day (its
	// --service-account-max-token-expiration, which it leaves unset).
	defaultTokenExpiration = time.Hour
	minTokenExpiration     = 10 * time.Minute
	maxTokenRequest        = 1 << 32 * time.Second
	maxTokenExpiration     = 24 * time.Hour
	// deletedPodGrace: a token bound to a terminating pod stays valid this
	// long after the pod's deletion timestamp, so the pod can still report
	// its shutdown (kube-apiserver allows 60 s too).
	deletedPodGrace = 60 * time.Second
)

var tokenRequestRes = &resource{gv: authenticationv1.SchemeGroupVersion, kind: "TokenRequest",
	newObj: func() runtime.Object { return &authenticationv1.TokenRequest{} }}

// serviceAccountUsername is the user a service account's token names.
func serviceAccountUsername(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// createToken serves POST serviceaccounts/<name>/token.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	obj, err := s.decodeObject(w, r, tokenRequestRes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	tr := obj.(*authenticationv1.TokenRequest)
	if tr.Namespace != "" && tr.Namespace != req.namespace {
		s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("namespace %q of the TokenRequest does not match the request's %q", tr.Namespace, req.namespace)))
		return
	}
	if err := s.issueToken(r, req, tr); err != nil {
		s.fail(w, r, err)
		return
	}
	s.respond(w, r, http.StatusCreated, tr)
}

// issueToken checks tr's spec, fills in its defaults and its status.
func (s *Server) issueToken(r *http.Request, req *apiRequest, tr *authenticationv1.TokenRequest) error {
	spec := &tr.Spec
	if spec.ExpirationSeconds == nil {
		secs := int64(defaultTokenExpiration / time.Second)
		spec.ExpirationSeconds = &secs
	}
	path := field.NewPath("spec", "expirationSeconds")
	switch life := time.Duration(*spec.ExpirationSeconds) * time.Second; {
	case life < minTokenExpiration:
		return apierrors.NewInvalid(tokenRequestRes.gvk().GroupKind(), req.name, field.ErrorList{field.Invalid(path, *spec.ExpirationSeconds, "may not specify a duration less than 10 minutes")})
	case life > maxTokenRequest:
		return apierrors.NewInvalid(tokenRequestRes.gvk().GroupKind(), req.name, field.ErrorList{field.Invalid(path, *spec.ExpirationSeconds, "may not specify a duration larger than 2^32 seconds")})
	case life > maxTokenExpiration:
		secs := int64(maxTokenExpiration / time.Second)
		spec.ExpirationSeconds = &secs
	}
	if len(spec.Audiences) == 0 {
		spec.Audiences = []string{serviceAccountIssuer}
	}
	// Fresh reads, not the cache: a client that has just created the
	// account or the pod must be able to get a token for it.
	saObj, err := req.res.store.Get(r.Context(), req.key())
	if err != nil {
		return s.storageError(req, err)
	}
	sa := saObj.(*corev1.ServiceAccount)
	now := time.Now()
	c := satoken.Claims{
		Issuer: serviceAccountIssuer, Subject: serviceAccountUsername(sa.Namespace, sa.Name), Audience: spec.Audiences,
		IssuedAt: now.Unix(), NotBefore: now.Unix(), Expiry: now.Add(time.Duration(*spec.ExpirationSeconds) * time.Second).Unix(),
		ID:         string(uuid.NewUUID()),
		Kubernetes: satoken.Kubernetes{Namespace: sa.Namespace, ServiceAccount: satoken.Ref{Name: sa.Name, UID: string(sa.UID)}},
	}
	if ref := spec.BoundObjectRef; ref != nil {
		pod, err := s.boundPod(r, req, ref)
		if err != nil {
			return err
		}
		ref.APIVersion, ref.UID = "v1", pod.UID
		c.Kubernetes.Pod = &satoken.Ref{Name: pod.Name, UID: string(pod.UID)}
	}
	token, err := s.saKey.Sign(c)
	if err != nil {
		return err
	}
	tr.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(time.Unix(c.Expiry, 0))}
	tr.Namespace, tr.Name, tr.CreationTimestamp = sa.Namespace, sa.Name, metav1.NewTime(now)
	return nil
}

// boundPod is the pod a TokenRequest binds its token to, which must run
// as the service account.
func (s *Server) boundPod(r *http.Request, req *apiRequest, ref *authenticationv1.BoundObjectReference) (*corev1.Pod, error) {
	if ref.Kind != "Pod" || (ref.APIVersion != "" && ref.APIVersion != "v1") {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind a token to a %s %s: this server binds tokens to v1 Pods only", ref.APIVersion, ref.Kind))
	}
	podReq := &apiRequest{res: s.byGV[coreV1]["pods"], namespace: req.namespace, name: ref.Name}
	obj, err := podReq.res.store.Get(r.Context(), podReq.key())
	if err != nil {
		return nil, s.storageError(podReq, err)
	}
	pod := obj.(*corev1.Pod)
	if ref.UID != "" && ref.UID != pod.UID {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) is not the pod's (%s): the pod was deleted and created again", ref.UID, pod.UID))
	}
	if podSA(pod) != req.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot bind a token of service account %q to pod %q, which runs as %q", req.name, pod.Name, podSA(pod)))
	}
	return pod, nil
}

func podSA(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// serviceAccountUser authenticates a service account token: signature,
// issuer, audience and lifetime, then that the account (and bound pod)
// the token was issued for still exist, read from the watch caches.
func (s *Server) serviceAccountUser(token string) (user, error) {
	c, err := s.saKey.Verify(token, serviceAccountIssuer, []string{serviceAccountIssuer}, time.Now())
	if err != nil {
		return user{}, err
	}
	k := c.Kubernetes
	if c.Subject != serviceAccountUsername(k.Namespace, k.ServiceAccount.Name) {
		return user{}, fmt.Errorf("%w: subject %q does not name its service account", satoken.ErrInvalid, c.Subject)
	}
	if err := alive(s.byGV[coreV1]["serviceaccounts"].cache, s.byGV[coreV1]["serviceaccounts"].store, k.Namespace, k.ServiceAccount); err != nil {
		return user{}, fmt.Errorf("service account %s/%s: %w", k.Namespace, k.ServiceAccount.Name, err)
	}
	u := user{Name: c.Subject, UID: k.ServiceAccount.UID,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + k.Namespace, "system:authenticated"}}
	if c.ID != "" {
		u.Extra = map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=" + c.ID}}
	}
	if p := k.Pod; p != nil {
		pods := s.byGV[coreV1]["pods"]
		if err := alive(pods.cache, pods.store, k.Namespace, *p); err != nil {
			return user{}, fmt.Errorf("pod %s/%s: %w", k.Namespace, p.Name, err)
		}
		if u.Extra == nil {
			u.Extra = map[string][]string{}
		}
		u.Extra["authentication.kubernetes.io/pod-name"] = []string{p.Name}
		u.Extra["authentication.kubernetes.io/pod-uid"] = []string{p.UID}
	}
	return u, nil
}

// alive checks that ref's object is in the cache with ref's UID and not
// terminating for longer than deletedPodGrace.
func alive(c *storage.Cache, st *storage.Store, namespace string, ref satoken.Ref) error {
	obj := c.Get(st.Key(namespace, ref.Name))
	if m, ok := obj.(metav1.Object); obj == nil || ok && string(m.GetUID()) != ref.UID {
		// The cache may not have this server's latest write yet (an
		// account created a moment ago): wait for it before refusing.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.WaitRevision(ctx, st.LastWrite())
		cancel()
		if err == nil {
			obj = c.Get(st.Key(namespace, ref.Name))
		}
	}
	if obj == nil {
		return fmt.Errorf("%w: deleted", satoken.ErrInvalid)
	}
	m, ok := obj.(metav1.Object)
	switch {
	case !ok:
		return fmt.Errorf("%w: unexpected %T", satoken.ErrInvalid, obj)
	case string(m.GetUID()) != ref.UID:
		return fmt.Errorf("%w: deleted and created again (uid %s, token names %s)", satoken.ErrInvalid, m.GetUID(), ref.UID)
	case m.GetDeletionTimestamp() != nil && time.Since(m.GetDeletionTimestamp().Time) > deletedPodGrace:
		return fmt.Errorf("%w: deleted at %s", satoken.ErrInvalid, m.GetDeletionTimestamp().UTC().Format(time.RFC3339))
	}
	return nil
}
