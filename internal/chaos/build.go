package chaos

import (
	"fmt"
	"os/exec"
)

// BrokenTag is the build tag of the deliberately broken server: a new
// leader does not extend session deadlines on promotion.
const BrokenTag = "dlm_broken_promotion"

// Build builds the dlm command into out (with the broken tag if broken),
// without -race. It needs the go command and this module's source.
func Build(out string, broken bool) error {
	args := []string{"build", "-o", out}
	if broken {
		args = append(args, "-tags", BrokenTag)
	}
	cmd := exec.Command("go", append(args, "github.com/dlmhq/dlm/cmd/dlm")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: go build dlm (broken %v): %v\n%s", broken, err, b)
	}
	return nil
}
