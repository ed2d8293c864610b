package validation

import (
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ServiceCIDR validates a ServiceCIDR on create (ValidateServiceCIDR
// upstream): one or two CIDRs, one of each family.
func ServiceCIDR(c *networkingv1.ServiceCIDR) field.ErrorList {
	allErrs := validateObjectMetaCreate(&c.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateServiceCIDRSpec(c.Spec.CIDRs, specPath.Child("cidrs"))...)
	return allErrs
}

func validateServiceCIDRSpec(cidrs []string, fldPath *field.Path) field.ErrorList {
	switch {
	case len(cidrs) == 0:
		return field.ErrorList{field.Required(fldPath, "at least one CIDR required")}
	case len(cidrs) > 2:
		return field.ErrorList{field.Invalid(fldPath, cidrs, "may only hold up to 2 values")}
	}
	var allErrs field.ErrorList
	for i, c := range cidrs {
		allErrs = append(allErrs, validateCIDR(c, fldPath.Index(i))...)
	}
	if len(allErrs) == 0 && len(cidrs) == 2 && cidrFamilyOf(cidrs[0]) == cidrFamilyOf(cidrs[1]) {
		allErrs = append(allErrs, field.Invalid(fldPath, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
	}
	return allErrs
}

// ServiceCIDRUpdate validates an update of a ServiceCIDR. Upstream lets a
// single-stack ServiceCIDR gain a second family; this server allocates only
// from the ranges it was started with, so spec.cidrs never changes through
// the API (the server itself rewrites the default one from its flags).
func ServiceCIDRUpdate(newC, oldC *networkingv1.ServiceCIDR) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newC.ObjectMeta, &oldC.ObjectMeta)
	if !equalStrings(newC.Spec.CIDRs, oldC.Spec.CIDRs) {
		allErrs = append(allErrs, field.Invalid(specPath.Child("cidrs"), newC.Spec.CIDRs,
			fmt.Sprintf("%s: this API server allocates ClusterIPs from --service-cluster-ip-range only; restart it with the new range(s) to change them", apimachineryvalidation.FieldImmutableErrorMsg)))
	}
	return allErrs
}

// ServiceCIDRStatusUpdate validates a status update of a ServiceCIDR: as
// ValidateServiceCIDRStatusUpdate upstream, metadata only (and the spec,
// which a status write may not touch).
func ServiceCIDRStatusUpdate(newC, oldC *networkingv1.ServiceCIDR) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newC.ObjectMeta, &oldC.ObjectMeta)
	allErrs = append(allErrs, validateImmutable(newC.Spec, oldC.Spec, specPath)...)
	return allErrs
}

// IPAddress validates an IPAddress (ValidateIPAddress upstream): the name
// is an IP address in canonical form and a parentRef names its owner.
func IPAddress(a *networkingv1.IPAddress) field.ErrorList {
	allErrs := validateObjectMetaCreate(&a.ObjectMeta, false, ipAddressName)
	ref := a.Spec.ParentRef
	refPath := specPath.Child("parentRef")
	if ref == nil {
		return append(allErrs, field.Required(refPath, ""))
	}
	if ref.Group != "" {
		allErrs = append(allErrs, validateDNS1123Subdomain(ref.Group, refPath.Child("group"))...)
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{{"resource", ref.Resource, true}, {"name", ref.Name, true}, {"namespace", ref.Namespace, false}} {
		switch {
		case f.value == "" && f.required:
			allErrs = append(allErrs, field.Required(refPath.Child(f.name), ""))
		case f.value != "":
			allErrs = append(allErrs, invalid(refPath.Child(f.name), f.value, path.IsValidPathSegmentName(f.value))...)
		}
	}
	return allErrs
}

// ipAddressName: IPAddress names are the address itself, in canonical form,
// so that one address can have only one object.
func ipAddressName(name string, _ bool) []string {
	ip, err := netip.ParseAddr(name)
	switch {
	case err != nil:
		return []string{"must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"}
	case ip.Zone() != "" || ip.Is4In6():
		return []string{"must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"}
	case ip.String() != name:
		return []string{fmt.Sprintf("must be in canonical form (%q)", ip.String())}
	}
	return nil
}
