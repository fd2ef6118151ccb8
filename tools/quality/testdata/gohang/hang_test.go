package hang

import (
	"testing"
	"time"
)

func TestAQuick(t *testing.T) {}

func TestBHang(t *testing.T) { time.Sleep(time.Hour) }
