package apiserver

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// wireCodecs decode request bodies in every format client-go sends. Since
// client-go 1.35 the typed clients write protobuf by default; responses stay
// JSON, which every client accepts.
var wireCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(discoveryv1.AddToScheme(scheme))
	utilruntime.Must(coordinationv1.AddToScheme(scheme))
	utilruntime.Must(eventsv1.AddToScheme(scheme))
	utilruntime.Must(networkingv1.AddToScheme(scheme))
	utilruntime.Must(authorizationv1.AddToScheme(scheme))
	utilruntime.Must(authenticationv1.AddToScheme(scheme))
	utilruntime.Must(appsv1.AddToScheme(scheme))
	utilruntime.Must(rbacv1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme)
}()

// protobufToJSON turns a Kubernetes protobuf envelope into JSON so that one
// decoding path (with its strictness and kind checks) serves every format.
func protobufToJSON(data []byte) ([]byte, error) {
	obj, gvk, err := wireCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode protobuf body: %v", err))
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("re-encode protobuf body: %v", err))
	}
	return out, nil
}
