// Package report turns netperf results from kind clusters into the report
// a person reads first: a Markdown table (median and spread of each test
// per scenario and data plane, as a share of the node-to-node baseline)
// and one SVG bar chart per test. It only formats; measuring is
// bench/kind's job, so the report can be regenerated from a recorded
// results file, as the self-test does.
package report
