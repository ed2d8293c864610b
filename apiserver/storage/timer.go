package storage

import "time"

// timer starts a stopwatch; the returned func reports elapsed seconds.
func timer() func() float64 {
	start := time.Now()
	return func() float64 { return time.Since(start).Seconds() }
}
