// promql-names reads PromQL expressions, one per line, on stdin and prints,
// for each, the metric names it selects (space-separated), or "error: ..."
// when Prometheus's own parser refuses it. The chart tests use it to check
// the dashboard's and the alerts' queries (hack/install-promql-names.sh).
package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
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
		names := map[string]bool{}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				if vs.Name != "" {
					names[vs.Name] = true
				}
				for _, m := range vs.LabelMatchers {
					if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						names[m.Value] = true
					}
				}
			}
			return nil
		})
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		fmt.Println(strings.Join(sorted, " "))
	}
}
