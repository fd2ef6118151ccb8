package tools

// CheckCatalogAgainst is CheckCatalog against a given catalog: with every tool of
// the design documented, only a shortened catalog has a registered tool it lacks.
var CheckCatalogAgainst = checkCatalog
