// promql is Prometheus's own PromQL parser and engine as a tool for the
// chart tests (hack/install-promql.sh builds it):
//
//	promql              reads PromQL expressions, one per line, on stdin and
//	                    prints, for each, the metric names it selects
//	                    (space-separated), or "error: ..." when the parser
//	                    refuses it;
//	promql eval FILE... runs promqltest scripts (load series, evaluate
//	                    expressions, compare with the expected result: the
//	                    promql/promqltest/README.md of Prometheus) and exits
//	                    non-zero when one fails.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "eval" {
		eval(os.Args[2:])
		return
	}
	names()
}

func names() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	p := parser.NewParser(parser.Options{})
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		expr, err := p.ParseExpr(line)
		if err != nil {
			fmt.Printf("error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		found := map[string]bool{}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				if vs.Name != "" {
					found[vs.Name] = true
				}
				for _, m := range vs.LabelMatchers {
					if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						found[m.Value] = true
					}
				}
			}
			return nil
		})
		sorted := make([]string, 0, len(found))
		for n := range found {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		fmt.Println(strings.Join(sorted, " "))
	}
}

// eval runs each script as a Go test: promqltest reports through testing.TB.
func eval(files []string) {
	testing.Init()
	tests := make([]testing.InternalTest, 0, len(files))
	for _, file := range files {
		tests = append(tests, testing.InternalTest{
			Name: filepath.Base(file),
			F: func(t *testing.T) {
				script, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
				promqltest.RunTest(t, string(script), engine)
			},
		})
	}
	os.Args = []string{os.Args[0], "-test.v"}
	testing.Main(func(_, _ string) (bool, error) { return true, nil }, tests, nil, nil)
}
