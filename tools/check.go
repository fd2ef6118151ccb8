package tools

import (
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed catalog.yaml
var catalogYAML []byte

// Documented is one entry of tools/catalog.yaml.
type Documented struct {
	Name    string `yaml:"name" json:"name"`
	Group   string `yaml:"group" json:"group"`
	Tier    string `yaml:"tier" json:"tier"`
	Purpose string `yaml:"purpose" json:"purpose"`
	// AgentOnly marks a tool that only a team's agents can use (AgentOnly).
	AgentOnly bool `yaml:"agent_only" json:"agent_only,omitempty"`
	// AlwaysHuman marks a tool only a person may approve; its registration says
	// so too (tools.AlwaysHuman), and CheckCatalog compares the two.
	AlwaysHuman bool `yaml:"always_human" json:"always_human,omitempty"`
	// Reads is the provenance of what the tool returns (private, untrusted; empty
	// is trusted), as its registration declares (tools.Reads).
	Reads string `yaml:"reads" json:"reads,omitempty"`
}

// documented is the catalog by name, parsed once. A catalog that does not parse
// is empty here: CheckCatalog reports why at every process's boot, and a test
// parses it (TestCatalogMatchesRegistrations).
var documented = sync.OnceValue(func() map[string]Documented {
	docs, err := Catalog()
	if err != nil {
		return nil
	}
	m := make(map[string]Documented, len(docs))
	for _, d := range docs {
		m[d.Name] = d
	}
	return m
})

// Catalog returns the documented catalog.
func Catalog() ([]Documented, error) {
	var doc struct {
		Tools []Documented `yaml:"tools"`
	}
	if err := yaml.Unmarshal(catalogYAML, &doc); err != nil {
		return nil, fmt.Errorf("tools/catalog.yaml: %w", err)
	}
	return doc.Tools, nil
}

// CheckCatalog fails when the registered tools and the documented catalog differ in
// membership, group, tier, always_human or reads. Every process runs it at boot.
func CheckCatalog(reg *Registry) error {
	docs, err := Catalog()
	if err != nil {
		return err
	}
	return checkCatalog(reg, docs)
}

func checkCatalog(reg *Registry, docs []Documented) error {
	var errs []error
	seen := map[string]bool{}
	for _, d := range docs {
		seen[d.Name] = true
		s, ok := reg.Spec(d.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("catalog: %s is documented but not registered", d.Name))
			continue
		}
		if s.Group != d.Group {
			errs = append(errs, fmt.Errorf("catalog: %s is in group %s, documented as %s", d.Name, s.Group, d.Group))
		}
		if s.Tier.String() != d.Tier {
			errs = append(errs, fmt.Errorf("catalog: %s has tier %s, documented as %s", d.Name, s.Tier, d.Tier))
		}
		if p, err := ParseProvenance(d.Reads); err != nil {
			errs = append(errs, fmt.Errorf("catalog: %s: %w", d.Name, err))
		} else if s.Reads != p {
			errs = append(errs, fmt.Errorf("catalog: %s reads %s, documented as reading %s", d.Name, s.Reads, p))
		}
		if s.AlwaysHuman != d.AlwaysHuman {
			errs = append(errs, fmt.Errorf("catalog: %s is registered with AlwaysHuman %t, documented with always_human %t", d.Name, s.AlwaysHuman, d.AlwaysHuman))
		}
	}
	for _, n := range reg.Names() {
		if !seen[n] {
			errs = append(errs, fmt.Errorf("catalog: %s is registered but not documented in tools/catalog.yaml", n))
		}
	}
	return errors.Join(errs...)
}
