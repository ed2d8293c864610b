package hostrouting

import (
	"os"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

func TestMain(m *testing.M) { os.Exit(nettest.CheckNoLeaks(m)) }
