package kernel

import (
	"os"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) { os.Exit(nettest.CheckNoLeaks(m)) }
