// Package proxytest is the real-kernel test suite every proxy data plane
// must pass: a node namespace running the proxy core + the data plane under
// test, two backend "pod" namespaces with TCP/UDP echo servers, and a client
// namespace, all dual-stack and throwaway (internal/nettest) and fed by a
// real API server (internal/testapi). A data plane's test calls KernelSuite
// with a constructor; nothing here touches the root namespace.
package proxytest
