package wsquota

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Tier is a workspace's storage tier (the seed's §14): each has its own quota,
// retention and location.
type Tier string

// The tiers. A workspace's tier follows from its id, which the run row fixes
// when the run is created (store.Run.WorkspaceID): project-<project id> is a
// project's workspace (Production), staging-<run id> a project run's staging
// workspace (Staging), any other id (a plain run's own, <run id>) is Temp.
const (
	// TierProduction holds the projects' workspaces: kept while the project
	// exists, the larger quota.
	TierProduction Tier = "production"
	// TierStaging holds the workspaces of a project's staging runs until one is
	// promoted into the project's Production workspace.
	TierStaging Tier = "staging"
	// TierTemp holds the plain runs' workspaces: the smaller quota, deleted after
	// the retention.
	TierTemp Tier = "temp"
)

// Tiers lists the tiers in a fixed order.
var Tiers = []Tier{TierProduction, TierStaging, TierTemp}

// The id prefixes that name a workspace's tier (store.Run.WorkspaceID makes
// them: store.ProjectWorkspacePrefix, store.StagingWorkspacePrefix).
const (
	ProductionPrefix = "project-"
	StagingPrefix    = "staging-"
)

// TierOf is the tier of workspace id.
func TierOf(id string) Tier {
	switch {
	case strings.HasPrefix(id, ProductionPrefix):
		return TierProduction
	case strings.HasPrefix(id, StagingPrefix):
		return TierStaging
	}
	return TierTemp
}

// IsTierID reports whether id has the exact shape of a workspace id of tier t
// (a prefix and a canonical UUID, or a bare UUID for Temp): only such ids are
// ever deleted by retention, so a directory that merely sits in a tier's
// location (another tier's location under it, an operator's file) never is.
func IsTierID(t Tier, id string) bool {
	rest := id
	switch t {
	case TierProduction:
		rest = strings.TrimPrefix(id, ProductionPrefix)
	case TierStaging:
		rest = strings.TrimPrefix(id, StagingPrefix)
	}
	if TierOf(id) != t {
		return false
	}
	u, err := uuid.Parse(rest)
	return err == nil && u.String() == rest
}

// Defaults of TierConfig.
const (
	// DefaultProductionQuota is a project workspace's size: kept for the project's
	// life and shared by its runs, so larger than a run's.
	DefaultProductionQuota Size = 4 << 30
	// DefaultStagingRetention is how long after its run ended a staging workspace
	// is kept (to be promoted, or looked at) before the retention sweep deletes it.
	DefaultStagingRetention = 30 * 24 * time.Hour
	// DefaultTempRetention is how long after its run ended a plain run's
	// workspace is kept before the retention sweep deletes it.
	DefaultTempRetention = 7 * 24 * time.Hour
)

// TierConfig is one tier's limits.
type TierConfig struct {
	// Quota is the size of the tier's new workspaces; 0 takes workspace_quota.
	// workspace_quota: 0 turns quotas off for every tier.
	Quota Size `yaml:"quota"`
	// Retention is how long a workspace of the tier is kept once nothing uses it
	// (its run ended that long ago; Production: its project was deleted that long
	// ago) before the retention sweep deletes it and its image. 0 keeps it.
	Retention time.Duration `yaml:"retention"`
	// Location is the directory of the tier's workspaces: relative to the
	// workspaces root ("" is the root itself), or absolute (another disk). It
	// must be a clean path without "..": a location cannot climb out of where it
	// says, nor name the images directory.
	Location string `yaml:"location"`
}

// TiersConfig is the three tiers' limits (the `workspace_tiers` key).
type TiersConfig struct {
	// Production: the projects' workspaces. Default quota DefaultProductionQuota,
	// retention 0 (kept; a project's delete removes its workspace).
	Production TierConfig `yaml:"production"`
	// Staging: a project's staging runs' workspaces. Default quota
	// workspace_quota, retention DefaultStagingRetention.
	Staging TierConfig `yaml:"staging"`
	// Temp: the plain runs' workspaces. Default quota workspace_quota, retention
	// DefaultTempRetention.
	Temp TierConfig `yaml:"temp"`
}

// DefaultTiers is the tiers' documented defaults: every tier at the workspaces
// root (where workspaces were before tiers, so an upgrade finds them).
func DefaultTiers() TiersConfig {
	return TiersConfig{
		Production: TierConfig{Quota: DefaultProductionQuota},
		Staging:    TierConfig{Retention: DefaultStagingRetention},
		Temp:       TierConfig{Retention: DefaultTempRetention},
	}
}

// Of is tier t's configuration.
func (c TiersConfig) Of(t Tier) TierConfig {
	switch t {
	case TierProduction:
		return c.Production
	case TierStaging:
		return c.Staging
	}
	return c.Temp
}

// Validate reports bad values, naming the key.
func (c TiersConfig) Validate() error {
	var errs []string
	for _, t := range Tiers {
		tc, key := c.Of(t), "workspace_tiers."+string(t)
		if tc.Quota != 0 && tc.Quota < MinQuota {
			errs = append(errs, fmt.Sprintf("%s.quota: %s is below the minimum %s (0 takes workspace_quota)", key, tc.Quota, MinQuota))
		}
		if tc.Retention < 0 {
			errs = append(errs, fmt.Sprintf("%s.retention: must not be negative (0 keeps), got %s", key, tc.Retention))
		}
		if err := checkLocation(tc.Location); err != nil {
			errs = append(errs, fmt.Sprintf("%s.location: %v", key, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// checkLocation refuses a location that is not what it says: a path with "..",
// one that is not clean (a/./b, a//b, a trailing slash), the filesystem root, a
// NUL, or a relative one whose first element starts with a dot (the images
// directory, a hidden directory the sweep skips).
func checkLocation(loc string) error {
	if loc == "" {
		return nil
	}
	if strings.ContainsRune(loc, 0) || strings.ContainsRune(loc, '\\') {
		return fmt.Errorf("%q: no NUL or backslash", loc)
	}
	for _, el := range strings.Split(loc, "/") {
		if el == ".." {
			return fmt.Errorf("%q climbs out with \"..\": give the directory itself", loc)
		}
	}
	if filepath.Clean(loc) != loc {
		return fmt.Errorf("%q is not a clean path (want %q)", loc, filepath.Clean(loc))
	}
	if loc == "/" || loc == "." {
		return fmt.Errorf("%q: name a directory of its own (\"\" is the workspaces root)", loc)
	}
	if !filepath.IsAbs(loc) && strings.HasPrefix(loc, ".") {
		return fmt.Errorf("%q starts with a dot (reserved: %s holds the images)", loc, ImagesDir)
	}
	return nil
}

// tierRoot is the absolute directory of a tier at location loc (checked) under
// the workspaces root.
func tierRoot(root, loc string) string {
	if loc == "" {
		return root
	}
	if filepath.IsAbs(loc) {
		return loc
	}
	return filepath.Join(root, loc)
}
