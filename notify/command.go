package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// commandWaitDelay is how long a command that timed out, and was killed,
// may take to let go of its output before Send returns anyway.
const commandWaitDelay = time.Second

// Command runs a shell command per event, the event's JSON on its stdin.
type Command struct {
	line string
	name string
	// Log gets the last line a failing command wrote on stderr, at debug:
	// it may hold secrets, so it never goes into Send's error, which the
	// store keeps for any reader.
	Log zerolog.Logger
}

// NewCommand is a sink that runs line with /bin/sh -c.
func NewCommand(line string) (*Command, error) {
	if strings.TrimSpace(line) == "" {
		return nil, fmt.Errorf("invalid notify command: it is empty")
	}
	return &Command{line: line, name: commandName(line)}, nil
}

// assignment is a shell word that sets a variable (VAR=value), and
// plainName a program's name that says nothing but the program.
var (
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	plainName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
)

// commandName names line by the program it runs: the base name of its
// first word that is not a VAR=value assignment (those often carry
// tokens), or "command" when that word is no plain name (quoted, a
// substitution).
func commandName(line string) string {
	for _, w := range strings.Fields(line) {
		if assignment.MatchString(w) {
			continue
		}
		if base := path.Base(w); plainName.MatchString(base) {
			return "command " + base
		}
		break
	}
	return "command"
}

// String names the command by its program's base name: the rest of the
// line may hold secrets.
func (c *Command) String() string { return c.name }

// ID identifies the command by its name and its whole line's hash.
func (c *Command) ID() string { return sinkID(c.name, "command\x00"+c.line) }

// Send runs the command with e's JSON on stdin; exit status 0 is
// delivery. ctx's end kills it. Its error is the exit status alone.
func (c *Command) Send(ctx context.Context, e Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode the event: %w", err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.line)
	cmd.Stdin = bytes.NewReader(append(body, '\n'))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = commandWaitDelay
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		c.Log.Debug().Str("sink", c.name).Str("stderr", msg).Str("notice", e.IdempotencyKey).Msg("the notify command failed")
		return err
	}
	return nil
}
