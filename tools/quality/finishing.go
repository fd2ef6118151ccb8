package quality

import (
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tools/workspace"
)

// RegisterFinishing adds record_style and check_finishing, the two deterministic
// "is it finished" tools of the quality group. ws bounds the files they read and
// names the owner of the record they write, as for the workspace tools.
func RegisterFinishing(reg *tools.Registry, ws workspace.Config) {
	if ws.MaxFileBytes <= 0 {
		ws.MaxFileBytes = 1 << 20
	}
	registerStyle(reg, ws)
}
