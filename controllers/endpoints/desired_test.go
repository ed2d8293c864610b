package endpoints

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func addrs(n int, prefix string) []corev1.EndpointAddress {
	out := make([]corev1.EndpointAddress, n)
	for i := range out {
		out[i].IP = fmt.Sprintf("%s.%d.%d", prefix, i/250, i%250+1)
	}
	return out
}

// TestTruncate: ready addresses are kept first; the kind that is cut is cut
// in proportion across subsets.
func TestTruncate(t *testing.T) {
	for name, tc := range map[string]struct {
		ready, notReady         []int // per subset
		wantReady, wantNotReady []int
		cut                     bool
	}{
		"under the limit":          {[]int{500, 400}, []int{100, 0}, []int{500, 400}, []int{100, 0}, false},
		"not-ready cut first":      {[]int{600, 200}, []int{300, 100}, []int{600, 200}, []int{150, 50}, true},
		"ready cut proportionally": {[]int{900, 300}, []int{10, 10}, []int{750, 250}, []int{0, 0}, true},
		"rounding stays in limit":  {[]int{334, 333, 334}, nil, []int{334, 333, 333}, []int{0, 0, 0}, true},
	} {
		t.Run(name, func(t *testing.T) {
			var subsets []corev1.EndpointSubset
			for i, n := range tc.ready {
				ss := corev1.EndpointSubset{Addresses: addrs(n, fmt.Sprintf("10.%d", i))}
				if tc.notReady != nil {
					ss.NotReadyAddresses = addrs(tc.notReady[i], fmt.Sprintf("10.%d", 100+i))
				}
				subsets = append(subsets, ss)
			}
			if got := truncate(subsets, maxAddresses); got != tc.cut {
				t.Errorf("truncate reported %v, want %v", got, tc.cut)
			}
			total := 0
			for i, ss := range subsets {
				total += len(ss.Addresses) + len(ss.NotReadyAddresses)
				if len(ss.Addresses) != tc.wantReady[i] || (tc.wantNotReady != nil && len(ss.NotReadyAddresses) != tc.wantNotReady[i]) {
					t.Errorf("subset %d: %d ready, %d not ready; want %d, %d", i, len(ss.Addresses), len(ss.NotReadyAddresses), tc.wantReady[i], tc.wantNotReady[i])
				}
			}
			if total > maxAddresses {
				t.Errorf("%d addresses kept, more than %d", total, maxAddresses)
			}
		})
	}
}
