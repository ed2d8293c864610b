// Command pause is the pod sandbox's process in the offline kind node
// image: it holds the pod's namespaces open and exits on SIGINT or
// SIGTERM. It also reaps orphans, as the sandbox is PID 1 of a pod that
// shares its PID namespace.
package main
