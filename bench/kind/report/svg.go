package report

import (
	"fmt"
	"html"
	"strings"
)

// palette gives each data plane a colour; the baseline is grey.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"}

// Chart is one test's grouped bar chart: a group per scenario, a bar per
// data plane, each bar's height its median as a share of the baseline
// (or of the largest median when no baseline ran), labelled with the
// median itself.
func Chart(d Data, test string) string {
	_, scenarios, planes := d.order()
	base := d.baseline()[test]
	var maxV float64
	for _, r := range d.Results {
		if r.Test == test {
			maxV = max(maxV, Median(r.Values))
		}
	}
	scale, axis := base, "share of the node-to-node baseline"
	if scale <= 0 {
		scale, axis = maxV, "share of the best result"
	}
	top := 1.0
	if maxV/scale > top {
		top = maxV / scale
	}
	const left, chartH, barW, gap, topPad = 60, 240, 22, 26, 40
	// Wide enough for the scenario's label, which is drawn on two lines.
	groupW := max(len(planes)*barW+gap, 130)
	width := left + len(scenarios)*groupW + 20
	height := topPad + chartH + 60 + 18*len(planes)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%s — %s</text>`+"\n", left, html.EscapeString(test), html.EscapeString(axis))
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		y := topPad + chartH - int(f*chartH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/><text x="%d" y="%d" text-anchor="end">%.0f%%</text>`+"\n",
			left, y, width-20, y, left-4, y+4, 100*f*top)
	}
	for si, s := range scenarios {
		x0 := left + si*groupW + (groupW-len(planes)*barW)/2
		for pi, p := range planes {
			r, ok := d.find(p, s, test)
			if !ok {
				continue
			}
			m := Median(r.Values)
			h := int(m / scale / top * chartH)
			x, y := x0+pi*barW, topPad+chartH-h
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s, %s: %s %s</title></rect>`+"\n",
				x, y, barW-2, h, colour(p, pi), html.EscapeString(p), html.EscapeString(s), number(m), html.EscapeString(r.Unit))
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="9" text-anchor="middle">%.0f%%</text>`+"\n", x+barW/2, y-3, 100*m/scale)
		}
		first, rest, _ := strings.Cut(s, " ")
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s<tspan x="%d" dy="13">%s</tspan></text>`+"\n",
			x0+len(planes)*barW/2, topPad+chartH+16, html.EscapeString(first), x0+len(planes)*barW/2, html.EscapeString(rest))
	}
	for pi, p := range planes {
		y := topPad + chartH + 44 + 18*pi
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", left, y, colour(p, pi), left+18, y+10, html.EscapeString(p))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func colour(plane string, i int) string {
	if plane == Baseline {
		return "#999999"
	}
	return palette[i%len(palette)]
}

// ChartFile is the file name of a test's chart.
func ChartFile(test string) string { return "kind-netperf-" + strings.ToLower(test) + ".svg" }
