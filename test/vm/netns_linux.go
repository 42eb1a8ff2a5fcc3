package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/vishvananda/netlink"
)

// NetNSEnv is the environment variable EnterNetNS sets to "1" in the
// re-executed process, which runs inside the new network namespace.
const NetNSEnv = "BOOTY_NETNS"

// InNetNS reports whether this process is the one EnterNetNS re-executed
// inside a network namespace of its own.
func InNetNS() bool { return os.Getenv(NetNSEnv) == "1" }

// EnterNetNS makes the rest of the program run in a new, empty network
// namespace whose only interface is an up loopback, so that servers on
// 127.0.0.1 and QEMU's user networking (the guest reaches that loopback at
// 10.0.2.2) see nothing of the host's network.
//
// Called outside the namespace (NetNSEnv unset), it re-executes the
// program (/proc/self/exe with the same arguments and NetNSEnv=1) in a new
// network namespace, waits for it, and exits with its exit status; it never
// returns. Called inside, it brings lo up and returns. It prints the reason
// and exits with status 1 when it fails (the caller must run as root or with
// CAP_SYS_ADMIN). Call it first in TestMain or main.
func EnterNetNS() {
	if InNetNS() {
		if err := loUp(); err != nil {
			fmt.Fprintf(os.Stderr, "vm: enter network namespace: %v\n", err)
			os.Exit(1)
		}
		return
	}
	code, err := reexecInNetNS()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm: enter network namespace: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// reexecInNetNS runs this program again in a new network namespace and
// returns its exit status. SIGINT and SIGTERM are passed on to it.
func reexecInNetNS() (int, error) {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), NetNSEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("re-execute %s in a new network namespace (needs root): %w", os.Args[0], err)
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("wait for %s in network namespace: %w", os.Args[0], err)
	}
	return 0, nil
}

// loUp brings the loopback interface of the current namespace up.
func loUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find link lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set link lo up: %w", err)
	}
	return nil
}
