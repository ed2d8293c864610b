package validation

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)

// supportedPortProtocols is sorted the way upstream lists it in
// NotSupported errors.
var supportedPortProtocols = []corev1.Protocol{corev1.ProtocolSCTP, corev1.ProtocolTCP, corev1.ProtocolUDP}

// strictIPValidation corresponds to the StrictIPCIDRValidation behaviour of
// recent kube-apiserver releases: IPv4 octets with leading zeros (read as
// octal by some software, decimal by other) and IPv4-mapped IPv6 addresses
// are refused, and CIDRs must not have host bits set. Nothing stored by this
// server predates these rules, so there are no old values to grandfather in.
const strictIPValidation = true

// validateObjectMetaCreate runs the generic metadata checks of a create.
func validateObjectMetaCreate(meta *metav1.ObjectMeta, namespaced bool, nameFn apimachineryvalidation.ValidateNameFunc) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(meta, namespaced, nameFn, metadataPath)
}

// validateObjectMetaUpdate runs the generic metadata checks of an update.
// apimachinery's update check does not look at finalizer names (a create
// does); check them too so an update cannot store what a create refuses.
func validateObjectMetaUpdate(newMeta, oldMeta *metav1.ObjectMeta) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(newMeta, oldMeta, metadataPath)
	allErrs = append(allErrs, apimachineryvalidation.ValidateFinalizers(newMeta.Finalizers, metadataPath.Child("finalizers"))...)
	return allErrs
}

// invalid turns the messages of one of apimachinery's Is* checks into
// errors for value at fldPath; no messages means no errors.
func invalid(fldPath *field.Path, value any, msgs []string) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range msgs {
		allErrs = append(allErrs, field.Invalid(fldPath, value, msg))
	}
	return allErrs
}

func validateDNS1123Label(value string, fldPath *field.Path) field.ErrorList {
	return invalid(fldPath, value, utilvalidation.IsDNS1123Label(value))
}

func validateDNS1123Subdomain(value string, fldPath *field.Path) field.ErrorList {
	return invalid(fldPath, value, utilvalidation.IsDNS1123Subdomain(value))
}

func validateQualifiedName(value string, fldPath *field.Path) field.ErrorList {
	return invalid(fldPath, value, utilvalidation.IsQualifiedName(value))
}

func validateLabelValue(value string, fldPath *field.Path) field.ErrorList {
	return invalid(fldPath, value, utilvalidation.IsValidLabelValue(value))
}

// validateNodeName: node names are DNS subdomains (ValidateNodeName).
func validateNodeName(value string, fldPath *field.Path) field.ErrorList {
	return validateDNS1123Subdomain(value, fldPath)
}

func validatePortNum(port int32, fldPath *field.Path) field.ErrorList {
	return invalid(fldPath, port, utilvalidation.IsValidPortNum(int(port)))
}

// validatePortNumOrName checks a port that may reference a named container
// port (targetPort, probe ports).
func validatePortNumOrName(port intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	switch port.Type {
	case intstr.Int:
		return invalid(fldPath, port.IntValue(), utilvalidation.IsValidPortNum(port.IntValue()))
	case intstr.String:
		return invalid(fldPath, port.StrVal, utilvalidation.IsValidPortName(port.StrVal))
	default:
		return field.ErrorList{field.InternalError(fldPath, fmt.Errorf("unknown type: %v", port.Type))}
	}
}

func validatePortProtocol(proto corev1.Protocol, fldPath *field.Path) field.ErrorList {
	if proto == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	for _, p := range supportedPortProtocols {
		if p == proto {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(fldPath, proto, supportedPortProtocols)}
}

// validateIP checks an IP address field.
func validateIP(value string, fldPath *field.Path) field.ErrorList {
	return utilvalidation.IsValidIPForLegacyField(fldPath, value, strictIPValidation, nil)
}

// validateCIDR checks a subnet ("10.0.0.0/24") field.
func validateCIDR(value string, fldPath *field.Path) field.ErrorList {
	return utilvalidation.IsValidCIDRForLegacyField(fldPath, value, strictIPValidation, nil)
}

// validateNonSpecialIP refuses addresses that can never usefully identify a
// remote endpoint: traffic to them is answered locally by every node
// (ValidateNonSpecialIP upstream). value must already be a valid IP.
func validateNonSpecialIP(value string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	ip := net.ParseIP(value)
	if ip == nil {
		return field.ErrorList{field.Invalid(fldPath, value, "must be a valid IP address")}
	}
	if ip.IsUnspecified() {
		allErrs = append(allErrs, field.Invalid(fldPath, value, fmt.Sprintf("may not be unspecified (%v)", value)))
	}
	if ip.IsLoopback() {
		allErrs = append(allErrs, field.Invalid(fldPath, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if ip.IsLinkLocalUnicast() {
		allErrs = append(allErrs, field.Invalid(fldPath, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if ip.IsLinkLocalMulticast() {
		allErrs = append(allErrs, field.Invalid(fldPath, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return allErrs
}

// ipFamilyOf returns the family of a valid IP address, "" if it does not parse.
func ipFamilyOf(value string) corev1.IPFamily {
	ip := net.ParseIP(value)
	switch {
	case ip == nil:
		return ""
	case ip.To4() != nil:
		return corev1.IPv4Protocol
	default:
		return corev1.IPv6Protocol
	}
}

// cidrFamilyOf returns the family of a valid CIDR, "" if it does not parse.
func cidrFamilyOf(value string) corev1.IPFamily {
	ip, _, err := net.ParseCIDR(value)
	if err != nil {
		return ""
	}
	return ipFamilyOf(ip.String())
}

// validateDualStackList checks a list of IPs or CIDRs whose entries were
// already validated individually: at most two, no duplicates, one per
// family. It is the rule for node.spec.podCIDRs, pod.status.podIPs and
// service.spec.clusterIPs.
func validateDualStackList(values []string, familyOf func(string) corev1.IPFamily, what string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(values) < 2 {
		return nil
	}
	seen := map[string]bool{}
	for i, v := range values {
		if seen[v] {
			allErrs = append(allErrs, field.Duplicate(fldPath.Index(i), v))
		}
		seen[v] = true
	}
	if len(values) > 2 || familyOf(values[0]) == familyOf(values[1]) {
		allErrs = append(allErrs, field.Invalid(fldPath, values, fmt.Sprintf("may specify no more than one %s for each IP family", what)))
	}
	return allErrs
}

func validateLabels(labels map[string]string, fldPath *field.Path) field.ErrorList {
	return metav1validation.ValidateLabels(labels, fldPath)
}

func validateNonnegative(value int64, fldPath *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateNonnegativeField(value, fldPath)
}

func validatePositive(value int64, fldPath *field.Path) field.ErrorList {
	if value <= 0 {
		return field.ErrorList{field.Invalid(fldPath, value, "must be greater than 0")}
	}
	return nil
}

func validateImmutable(newVal, oldVal interface{}, fldPath *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(newVal, oldVal, fldPath)
}

var supportedTaintEffects = []corev1.TaintEffect{corev1.TaintEffectNoExecute, corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule}

func validateTaintEffect(effect corev1.TaintEffect, allowEmpty bool, fldPath *field.Path) field.ErrorList {
	if effect == "" {
		if allowEmpty {
			return nil
		}
		return field.ErrorList{field.Required(fldPath, "")}
	}
	for _, e := range supportedTaintEffects {
		if e == effect {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(fldPath, effect, supportedTaintEffects)}
}

// validateTolerations follows ValidateTolerations upstream.
func validateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range tolerations {
		idxPath := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, metav1validation.ValidateLabelName(t.Key, idxPath.Child("key"))...)
		}
		// An empty key with Exists matches every taint; with any other
		// operator it would match nothing useful.
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("effect"), t.Effect,
				"effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			allErrs = append(allErrs, validateLabelValue(t.Value, idxPath.Child("value"))...)
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("value"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		case corev1.TolerationOpLt, corev1.TolerationOpGt:
			if _, err := strconv.ParseInt(t.Value, 10, 64); err != nil {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("value"), t.Value,
					fmt.Sprintf("must be an integer when `operator` is '%s'", t.Operator)))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("operator"), t.Operator,
				[]corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists, corev1.TolerationOpGt, corev1.TolerationOpLt}))
		}
		allErrs = append(allErrs, validateTaintEffect(t.Effect, true, idxPath.Child("effect"))...)
	}
	return allErrs
}

// validateOptionalNamespace checks an optional namespace in an object
// reference (events, endpoint targets).
func validateOptionalNamespace(ns string, fldPath *field.Path) field.ErrorList {
	if ns == "" {
		return nil
	}
	var allErrs field.ErrorList
	allErrs = append(allErrs, invalid(fldPath, ns, apimachineryvalidation.ValidateNamespaceName(ns, false))...)
	return allErrs
}

func trimmedDNSName(name string) string {
	// A trailing dot marks a name as fully qualified; it is not part of the
	// subdomain syntax check.
	return strings.TrimSuffix(name, ".")
}
