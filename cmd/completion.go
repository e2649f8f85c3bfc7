package cmd

import (
	"io"

	"github.com/spf13/cobra"
)

// completionExample shows how to install the scripts by hand; the deb and rpm
// packages install them already.
const completionExample = `  # bash, in the current shell:
  source <(leasectl completion bash)
  # bash, in every new shell (needs the bash-completion package):
  leasectl completion bash > /etc/bash_completion.d/leasectl
  # zsh:
  leasectl completion zsh > "${fpath[1]}/_leasectl"
  # fish:
  leasectl completion fish > ~/.config/fish/completions/leasectl.fish`

// addCompletion adds cobra's own `completion bash|zsh|fish|powershell`
// command now, rather than when it runs, so that its help carries an
// example. Cobra binds the scripts' output when it adds the command, so the
// root's output is set to out first. Call it after every other command has
// been added.
func addCompletion(root *cobra.Command, out io.Writer) {
	root.SetOut(out)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Example = completionExample
		}
	}
}
