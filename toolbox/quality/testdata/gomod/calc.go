package fixture

import "fmt"

// Add adds.
func Add(a, b int) int { return a + b }

// Show never prints: the planted unreachable call.
func Show() {
	return
	fmt.Println("never")
}
