package main

// runAgent is the PID-1 path: bring the machine up, load the config, provision, hand off.
func runAgent(args []string) int {
	panic("agent not wired yet")
}
