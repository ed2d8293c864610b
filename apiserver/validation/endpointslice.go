package validation

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Size limits of an EndpointSlice (upstream's maxEndpoints etc.): a slice is
// meant to be a bounded unit of work for every consumer's watch.
const (
	maxEndpointSliceEndpoints = 1000
	maxEndpointAddresses      = 100
	maxEndpointSlicePorts     = 100
	maxEndpointTopologyLabels = 16
	maxEndpointHints          = 8
)

var supportedAddressTypes = []discoveryv1.AddressType{discoveryv1.AddressTypeFQDN, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}

// EndpointSlice validates an EndpointSlice on create.
func EndpointSlice(s *discoveryv1.EndpointSlice) field.ErrorList {
	allErrs := validateObjectMetaCreate(&s.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateEndpointSliceBody(s)...)
	return allErrs
}

// EndpointSliceUpdate validates an update of an EndpointSlice. addressType
// is immutable: consumers index slices by it (one slice never mixes IPv4,
// IPv6 and FQDN).
func EndpointSliceUpdate(newSlice, oldSlice *discoveryv1.EndpointSlice) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newSlice.ObjectMeta, &oldSlice.ObjectMeta)
	allErrs = append(allErrs, validateEndpointSliceBody(newSlice)...)
	allErrs = append(allErrs, validateImmutable(newSlice.AddressType, oldSlice.AddressType, field.NewPath("addressType"))...)
	return allErrs
}

func validateEndpointSliceBody(s *discoveryv1.EndpointSlice) field.ErrorList {
	var allErrs field.ErrorList

	addrTypePath := field.NewPath("addressType")
	switch {
	case s.AddressType == "":
		allErrs = append(allErrs, field.Required(addrTypePath, ""))
	case !containsValue(supportedAddressTypes, s.AddressType):
		allErrs = append(allErrs, field.NotSupported(addrTypePath, s.AddressType, supportedAddressTypes))
	}

	allErrs = append(allErrs, validateEndpoints(s.Endpoints, s.AddressType, field.NewPath("endpoints"))...)
	allErrs = append(allErrs, validateEndpointPorts(s.Ports, field.NewPath("ports"))...)
	return allErrs
}

func validateEndpoints(endpoints []discoveryv1.Endpoint, addrType discoveryv1.AddressType, fldPath *field.Path) field.ErrorList {
	if len(endpoints) > maxEndpointSliceEndpoints {
		return field.ErrorList{field.TooMany(fldPath, len(endpoints), maxEndpointSliceEndpoints)}
	}
	var allErrs field.ErrorList
	for i, ep := range endpoints {
		idxPath := fldPath.Index(i)
		addrPath := idxPath.Child("addresses")

		if len(ep.Addresses) == 0 {
			allErrs = append(allErrs, field.Required(addrPath, "must contain at least 1 address"))
		} else if len(ep.Addresses) > maxEndpointAddresses {
			allErrs = append(allErrs, field.TooMany(addrPath, len(ep.Addresses), maxEndpointAddresses))
		}
		for j, addr := range ep.Addresses {
			allErrs = append(allErrs, validateEndpointAddress(addr, addrType, addrPath.Index(j))...)
		}

		if ep.Hostname != nil {
			allErrs = append(allErrs, validateDNS1123Label(*ep.Hostname, idxPath.Child("hostname"))...)
		}
		if ep.NodeName != nil {
			allErrs = append(allErrs, validateNodeName(*ep.NodeName, idxPath.Child("nodeName"))...)
		}
		// zone is free-form upstream (it is copied from a node label, but the
		// API does not insist); it is only compared for equality.

		topoPath := idxPath.Child("deprecatedTopology")
		if len(ep.DeprecatedTopology) > maxEndpointTopologyLabels {
			allErrs = append(allErrs, field.TooMany(topoPath, len(ep.DeprecatedTopology), maxEndpointTopologyLabels))
		}
		allErrs = append(allErrs, validateLabels(ep.DeprecatedTopology, topoPath)...)

		if ep.Hints != nil {
			allErrs = append(allErrs, validateEndpointHints(ep.Hints, idxPath.Child("hints"))...)
		}
		if ep.TargetRef != nil {
			allErrs = append(allErrs, validateOptionalNamespace(ep.TargetRef.Namespace, idxPath.Child("targetRef", "namespace"))...)
		}
	}
	return allErrs
}

// validateEndpointAddress checks an address against the slice's type. IPs
// must be of the slice's family and routable to a pod (no loopback,
// link-local or unspecified: every node would answer those itself).
func validateEndpointAddress(addr string, addrType discoveryv1.AddressType, fldPath *field.Path) field.ErrorList {
	switch addrType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		if errs := validateIP(addr, fldPath); len(errs) > 0 {
			return errs
		}
		want := corev1.IPFamily(addrType)
		if ipFamilyOf(addr) != want {
			return field.ErrorList{field.Invalid(fldPath, addr, "must be an "+string(want)+" address")}
		}
		return validateNonSpecialIP(addr, fldPath)
	case discoveryv1.AddressTypeFQDN:
		return utilvalidation.IsFullyQualifiedDomainName(fldPath, addr)
	}
	// Unknown address types are reported on addressType itself.
	return nil
}

func validateEndpointHints(h *discoveryv1.EndpointHints, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	zonesPath := fldPath.Child("forZones")
	if len(h.ForZones) > maxEndpointHints {
		allErrs = append(allErrs, field.TooMany(zonesPath, len(h.ForZones), maxEndpointHints))
	} else {
		seen := map[string]bool{}
		for i, z := range h.ForZones {
			namePath := zonesPath.Index(i).Child("name")
			if seen[z.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, z.Name))
			}
			seen[z.Name] = true
			allErrs = append(allErrs, validateLabelValue(z.Name, namePath)...)
		}
	}

	nodesPath := fldPath.Child("forNodes")
	if len(h.ForNodes) > maxEndpointHints {
		allErrs = append(allErrs, field.TooMany(nodesPath, len(h.ForNodes), maxEndpointHints))
	} else {
		seen := map[string]bool{}
		for i, n := range h.ForNodes {
			namePath := nodesPath.Index(i).Child("name")
			if seen[n.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, n.Name))
			}
			seen[n.Name] = true
			allErrs = append(allErrs, validateNodeName(n.Name, namePath)...)
		}
	}
	return allErrs
}

// validateEndpointPorts: port names must be unique (the empty name included,
// so at most one unnamed port): consumers match them to Service port names.
// Port 0 is allowed - it marks "all ports" for selectorless services.
func validateEndpointPorts(ports []discoveryv1.EndpointPort, fldPath *field.Path) field.ErrorList {
	if len(ports) > maxEndpointSlicePorts {
		return field.ErrorList{field.TooMany(fldPath, len(ports), maxEndpointSlicePorts)}
	}
	var allErrs field.ErrorList
	names := map[string]bool{}
	for i, p := range ports {
		idxPath := fldPath.Index(i)

		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			allErrs = append(allErrs, validateDNS1123Label(name, idxPath.Child("name"))...)
		}
		if names[name] {
			allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), name))
		}
		names[name] = true

		if p.Port != nil {
			allErrs = append(allErrs, invalid(idxPath.Child("port"), *p.Port, utilvalidation.IsInRange(int(*p.Port), 0, 65535))...)
		}

		if p.Protocol == nil {
			allErrs = append(allErrs, field.Required(idxPath.Child("protocol"), ""))
		} else {
			allErrs = append(allErrs, validatePortProtocol(*p.Protocol, idxPath.Child("protocol"))...)
		}

		if p.AppProtocol != nil {
			allErrs = append(allErrs, validateQualifiedName(*p.AppProtocol, idxPath.Child("appProtocol"))...)
		}
	}
	return allErrs
}
