package fixture

import "testing"

func TestAdd(t *testing.T) {
	if Add(1, 2) != 3 {
		t.Fatal("1+2")
	}
}

func TestAddWrong(t *testing.T) {
	if Add(2, 2) != 5 {
		t.Fatalf("planted failure: 2+2 = %d", Add(2, 2))
	}
}

func TestSkipped(t *testing.T) { t.Skip("planted skip") }

func TestAddNegative(t *testing.T) {
	if Add(-1, -1) != -2 {
		t.Fatal("-1-1")
	}
}
