package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// qmpDialBound bounds how long QMP waits for QEMU's socket to appear after
// QEMU started.
const qmpDialBound = 20 * time.Second

// qmpMessage is one line QEMU's monitor sends: the greeting, a command's
// return or error, or an asynchronous event.
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

// QMP connects to QEMU's QMP socket (-qmp unix:SOCKET,server=on,wait=off;
// retrying while it does not exist yet, within qmpDialBound), reads the
// greeting, leaves capability negotiation and runs command with args (nil:
// none), e.g. "set_link" with {"name": "nic0", "up": false}. It fails with
// QEMU's error class and description, or when ctx ends.
func QMP(ctx context.Context, socket, command string, args map[string]any) error {
	ctx, cancel := context.WithTimeout(ctx, qmpDialBound)
	defer cancel()
	var conn net.Conn
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", socket)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qmp %s: connect %s: %w (last error: %w)", command, socket, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	dec := json.NewDecoder(conn)
	enc := json.NewEncoder(conn)
	var greeting qmpMessage
	if err := dec.Decode(&greeting); err != nil {
		return fmt.Errorf("qmp %s: read greeting: %w", command, err)
	}
	if greeting.QMP == nil {
		return fmt.Errorf("qmp %s: %s is not a QMP socket", command, socket)
	}
	for _, cmd := range []string{"qmp_capabilities", command} {
		msg := map[string]any{"execute": cmd}
		if cmd == command && args != nil {
			msg["arguments"] = args
		}
		if err := enc.Encode(msg); err != nil {
			return fmt.Errorf("qmp %s: send %s: %w", command, cmd, err)
		}
		for {
			var m qmpMessage
			if err := dec.Decode(&m); err != nil {
				return fmt.Errorf("qmp %s: read answer to %s: %w", command, cmd, err)
			}
			if m.Event != "" {
				continue
			}
			if m.Error != nil {
				return fmt.Errorf("qmp %s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
			}
			if m.Return != nil {
				break
			}
			return errors.New("qmp " + cmd + ": answer without return or error")
		}
	}
	return nil
}
