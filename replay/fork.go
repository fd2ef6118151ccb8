package replay

// ForkResult is a started fork.
type ForkResult struct {
	RunID      string `json:"run_id"`
	ForkedFrom string `json:"forked_from"`
	At         int    `json:"at"`
	// Shared are the steps served from the record (1 .. At-1); Restored the
	// recorded calls re-applied to the fork's own state (its workspace files,
	// its plan); Live what runs live first.
	Shared   int    `json:"shared"`
	Restored int    `json:"restored"`
	Live     string `json:"live"`
	// WorkspaceHash is the fork's workspace as restored (fleet.WorkspaceHash: a SHA-256 over its files, paths and modes, without the engine's own directory).
	WorkspaceHash string `json:"workspace_hash"`
	Status        string `json:"status"`
	Position      int    `json:"position,omitempty"`
}
