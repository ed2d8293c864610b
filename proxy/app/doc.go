// Package app runs `nodenet proxy`: it holds the --proxy-mode switch above
// the core (proxy) and the data planes, which cmd/nodenet hands it as an
// explicit Modes map (no init-time registry), so the core never imports a
// data plane and a mode that is not built in fails at startup with a clear
// error instead of a stub that pretends.
package app
