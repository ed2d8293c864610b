package validation

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Endpoints validates core/v1 Endpoints on create (ValidateEndpointsCreate
// upstream). Tools that still read Endpoints (Prometheus discovery, ingress
// controllers) dial what is listed, so the same addresses EndpointSlices
// refuse are refused here.
func Endpoints(e *corev1.Endpoints) field.ErrorList {
	allErrs := validateObjectMetaCreate(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateEndpointSubsets(e.Subsets, field.NewPath("subsets"))...)
	return allErrs
}

// EndpointsUpdate validates an update. As upstream, subsets that did not
// change are not re-validated: older servers accepted data that is refused
// now, and an update of labels must not fail on it.
func EndpointsUpdate(newE, oldE *corev1.Endpoints) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newE.ObjectMeta, &oldE.ObjectMeta)
	allErrs = append(allErrs, apimachineryvalidation.ValidateObjectMeta(&newE.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, metadataPath)...)
	subsetErrs := validateEndpointSubsets(newE.Subsets, field.NewPath("subsets"))
	if len(subsetErrs) > 0 && apiequality.Semantic.DeepEqual(newE.Subsets, oldE.Subsets) {
		subsetErrs = nil
	}
	return append(allErrs, subsetErrs...)
}

func validateEndpointSubsets(subsets []corev1.EndpointSubset, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i := range subsets {
		ss := &subsets[i]
		idxPath := fldPath.Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			allErrs = append(allErrs, field.Required(idxPath, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j := range ss.Addresses {
			allErrs = append(allErrs, validateEndpointsAddress(&ss.Addresses[j], idxPath.Child("addresses").Index(j))...)
		}
		for j := range ss.NotReadyAddresses {
			allErrs = append(allErrs, validateEndpointsAddress(&ss.NotReadyAddresses[j], idxPath.Child("notReadyAddresses").Index(j))...)
		}
		// A name is what tells several ports apart; one port may go unnamed.
		for j := range ss.Ports {
			allErrs = append(allErrs, validateEndpointsPort(&ss.Ports[j], len(ss.Ports) > 1, idxPath.Child("ports").Index(j))...)
		}
	}
	return allErrs
}

func validateEndpointsAddress(a *corev1.EndpointAddress, fldPath *field.Path) field.ErrorList {
	ipPath := fldPath.Child("ip")
	allErrs := validateIP(a.IP, ipPath)
	if a.Hostname != "" {
		allErrs = append(allErrs, validateDNS1123Label(a.Hostname, fldPath.Child("hostname"))...)
	}
	if a.NodeName != nil {
		allErrs = append(allErrs, validateNodeName(*a.NodeName, fldPath.Child("nodeName"))...)
	}
	if ipFamilyOf(a.IP) != "" {
		allErrs = append(allErrs, validateNonSpecialIP(a.IP, ipPath)...)
	}
	return allErrs
}

func validateEndpointsPort(p *corev1.EndpointPort, requireName bool, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case requireName && p.Name == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	case p.Name != "":
		allErrs = append(allErrs, validateDNS1123Label(p.Name, fldPath.Child("name"))...)
	}
	allErrs = append(allErrs, validatePortNum(p.Port, fldPath.Child("port"))...)
	if p.Protocol == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("protocol"), ""))
	} else {
		allErrs = append(allErrs, validatePortProtocol(p.Protocol, fldPath.Child("protocol"))...)
	}
	if p.AppProtocol != nil {
		allErrs = append(allErrs, validateQualifiedName(*p.AppProtocol, fldPath.Child("appProtocol"))...)
	}
	return allErrs
}
