package fair_test

import (
	"os"
	"testing"

	"github.com/aetherium-engine/aetherium/internal/testdb"
)

// The Redis Cluster of the test matrix is shared by the binary and stopped here.
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }
