package main

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestAnalyse: kernel lines on the printk clock and agent lines on a wall
// clock with an arbitrary offset, each delivered with some delay, come out
// on the kernel's clock within the fastest line's delay.
func TestAnalyse(t *testing.T) {
	qemu := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	k0 := qemu.Add(700 * time.Millisecond)                 // kernel's printk zero on the host
	wallOff := 16*time.Second + 123456789*time.Nanosecond  // guest wall = kernel time + wallOff (+ an epoch)
	epoch := time.Date(2026, 12, 3, 6, 51, 0, 0, time.UTC) // guest wall at kernel time 0 minus wallOff
	var lines []stampedLine
	kern := func(sec float64, delay time.Duration, text string) {
		at := k0.Add(time.Duration(sec*float64(time.Second)) + delay)
		lines = append(lines, stampedLine{At: at, Text: fmt.Sprintf("[%12.6f] %s", sec, text)})
	}
	agent := func(sec float64, delay time.Duration, msg string) {
		kt := time.Duration(sec * float64(time.Second))
		wall := epoch.Add(wallOff + kt)
		lines = append(lines, stampedLine{At: k0.Add(kt + delay), Text: fmt.Sprintf("time=%s level=INFO msg=%q component=x", wall.Format("2006-01-02T15:04:05.000Z07:00"), msg)})
	}
	kern(0, 900*time.Millisecond, "Linux version 6.1") // replayed late: must not set the clock
	kern(0.5, 200*time.Microsecond, "printk: console [ttyS0] enabled")
	kern(1.94, 300*time.Microsecond, "Run /init as init process")
	agent(2.146, 150*time.Microsecond, "loaded module")
	kern(2.99, 5*time.Millisecond, "SGI XFS")
	agent(5.1, time.Millisecond, "network drivers loaded")
	agent(6.7, 2*time.Millisecond, "coldplug done")
	agent(6.9, time.Millisecond, "network up")
	agent(7.2, time.Millisecond, "config loaded")
	agent(7.6, 40*time.Millisecond, "writing image") // a slow line: its own delay must not count
	agent(14.6, time.Millisecond, "image written")
	agent(14.7, time.Millisecond, "handoff")

	r, err := analyse(lines, qemu)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"kernel start": 0, "agent (PID 1) start": 1.94, "first agent line": 2.146, "network drivers loaded": 5.1,
		"modules loaded (coldplug done)": 6.7, "network up": 6.9, "config loaded": 7.2,
		"first image byte": 7.6, "image written": 14.6, "handoff": 14.7,
	}
	for name, w := range want {
		got, ok := r.Milestones[name]
		if !ok {
			t.Errorf("%s: missing", name)
			continue
		}
		if math.Abs(got-w) > 0.001 { // the fastest lines' delays are 0.15 and 0.2 ms
			t.Errorf("%s: %.4f s, want %.4f", name, got, w)
		}
	}
	if len(r.Missing) != 0 {
		t.Errorf("missing %v", r.Missing)
	}
	if math.Abs(r.QEMUToKern-0.7) > 0.001 {
		t.Errorf("QEMU → kernel %.4f s, want 0.7", r.QEMUToKern)
	}

	if _, err := analyse(lines[:3], qemu); err == nil {
		t.Error("a console without agent lines was analysed")
	}
	if _, err := analyse(lines[3:4], qemu); err == nil {
		t.Error("a console without kernel lines was analysed")
	}
	r, err = analyse(lines[:4], qemu)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Missing) == 0 || r.Missing[0] != "network drivers loaded" {
		t.Errorf("missing %v, want the milestones after the first agent line", r.Missing)
	}
}
