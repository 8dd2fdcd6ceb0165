package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/slackline/slackline/estimator"
	"github.com/slackline/slackline/estimator/backtest"
)

func newPlotCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "plot -o FILE.png [trace.csv ...]",
		Short: "Draw the harvest/violation frontier of every estimator and anchor over a range of settings",
		Long: `plot replays each trace (and all of them together, "mix") through every
estimator and both anchors over a range of their settings (frontierFamilies
in plot.go lists them) and draws, per scenario, harvest (% of the ideal
slack offered on average) against violations (% of samples where the offer
exceeded the real slack by more than 0.05 cores), one point per setting; the
defaults are the large points, the dashed corner is the goal of issue 15
(at least 75% at most 1%), and the violation axis is a square-root scale.
Up and to the left is better. With no arguments it replays
estimator/testdata/*.csv.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("-o FILE.png is required")
			}
			if len(args) == 0 {
				args = []string{filepath.Join("estimator", "testdata", "*.csv")}
			}
			traces, err := loadTraces(args)
			if err != nil {
				return err
			}
			points, err := frontier(scenariosOf(traces, true, "mix"))
			if err != nil {
				return err
			}
			if err := drawFrontier(points, out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "PNG file to write")
	return cmd
}

// setting is one configuration of an estimator family.
type setting struct {
	name        string // e.g. "confirm 1s, margin 6%"
	isDefault   bool
	newEstimate func() (estimator.Estimator, error)
}

// family is an estimator (or anchor) and the settings the frontier tries.
type family struct {
	name     string
	color    color.Color
	shape    draw.GlyphDrawer
	settings []setting
}

// frontierFamilies returns the estimators and anchors the frontier replays,
// each over a range of the settings that trade harvest for safety.
func frontierFamilies() []family {
	withConfig := func(name string, change func(*estimator.Config)) func() (estimator.Estimator, error) {
		return func() (estimator.Estimator, error) {
			cfg := estimator.DefaultConfig()
			change(&cfg)
			return estimator.New(name, cfg)
		}
	}
	var fast []setting
	def := estimator.DefaultFastConfig()
	for _, confirm := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second} {
		for _, margin := range []float64{0.02, def.Margin, 0.15} {
			fast = append(fast, setting{
				name:      fmt.Sprintf("confirm %v, margin %.0f%%", confirm, 100*margin),
				isDefault: confirm == def.Confirm && margin == def.Margin,
				newEstimate: withConfig("fast", func(c *estimator.Config) {
					c.Fast.Confirm, c.Fast.Margin = confirm, margin
				}),
			})
		}
	}
	usageLike := func(name string) []setting {
		var out []setting
		for _, window := range []time.Duration{10 * time.Second, time.Minute} {
			for _, margin := range []float64{0.02, 0.10} {
				out = append(out, setting{
					name:      fmt.Sprintf("window %v, margin %.0f%%", window, 100*margin),
					isDefault: window == time.Minute && margin == 0.10,
					newEstimate: withConfig(name, func(c *estimator.Config) {
						c.Window, c.Margin = window, margin
					}),
				})
			}
		}
		return out
	}
	var koordinator []setting
	for _, threshold := range []float64{40, 60, 80, 95} {
		for _, report := range []time.Duration{10 * time.Second, time.Minute} {
			cfg := backtest.DefaultKoordinatorConfig()
			cfg.ThresholdPercent, cfg.ReportInterval = threshold, report
			cfg.AggregateDuration = min(cfg.AggregateDuration, report)
			koordinator = append(koordinator, setting{
				name:        fmt.Sprintf("threshold %.0f%%, report %v", threshold, report),
				isDefault:   cfg == backtest.DefaultKoordinatorConfig(),
				newEstimate: func() (estimator.Estimator, error) { return backtest.NewKoordinator(cfg), nil },
			})
		}
	}
	var katalyst []setting
	for _, sync := range []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second} {
		cfg := backtest.DefaultKatalystConfig()
		cfg.SyncPeriod, cfg.SlidingWindow = sync, 4*sync
		katalyst = append(katalyst, setting{
			name:        fmt.Sprintf("sync %v over %v", sync, 4*sync),
			isDefault:   cfg == backtest.DefaultKatalystConfig(),
			newEstimate: func() (estimator.Estimator, error) { return backtest.NewKatalyst(cfg), nil },
		})
	}
	return []family{
		{"fast", color.RGBA{0, 114, 178, 255}, draw.CircleGlyph{}, fast},
		{"usage", color.RGBA{0, 158, 115, 255}, draw.SquareGlyph{}, usageLike("usage")},
		{"predictive", color.RGBA{204, 121, 167, 255}, draw.TriangleGlyph{}, usageLike("predictive")},
		{"koordinator", color.RGBA{213, 94, 0, 255}, draw.CrossGlyph{}, koordinator},
		{"katalyst", color.RGBA{230, 159, 0, 255}, draw.PlusGlyph{}, katalyst},
	}
}

// frontierPoint is one replay: a family's setting on a scenario.
type frontierPoint struct {
	scenario, family, setting string
	isDefault                 bool
	result                    backtest.Result
}

// frontier replays every family's settings on every scenario.
func frontier(scenarios []backtest.Scenario) ([]frontierPoint, error) {
	var points []frontierPoint
	for _, sc := range scenarios {
		for _, f := range frontierFamilies() {
			for _, s := range f.settings {
				est, err := s.newEstimate()
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", f.name, s.name, err)
				}
				res, err := backtest.Replay(f.name, est, sc, backtest.DefaultOptions())
				if err != nil {
					return nil, err
				}
				points = append(points, frontierPoint{sc.Name, f.name, s.name, s.isDefault, res})
			}
		}
	}
	return points, nil
}

// drawFrontier draws one panel per scenario, harvest against violations,
// into a PNG.
func drawFrontier(points []frontierPoint, path string) error {
	var scenarios []string
	for _, p := range points {
		if len(scenarios) == 0 || scenarios[len(scenarios)-1] != p.scenario {
			scenarios = append(scenarios, p.scenario)
		}
	}
	families := frontierFamilies()
	cols := 4
	rows := (len(scenarios) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, sc := range scenarios {
		p := plot.New()
		p.Title.Text = sc
		p.X.Label.Text = "violations (% of samples)"
		p.Y.Label.Text = "harvest (% of ideal)"
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 2, 0, 100
		p.X.Scale, p.X.Tick.Marker = sqrtScale{}, violationTicks
		for _, pt := range points {
			if pt.scenario == sc {
				p.X.Max = max(p.X.Max, 100*pt.result.ViolationRate)
			}
		}
		// The goal of issue 15: at least 75% of the ideal at most 1% violated.
		goal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 75}, {X: 1, Y: 75}, {X: 1, Y: 100}})
		if err != nil {
			return err
		}
		goal.Color, goal.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(goal)
		for _, f := range families {
			var all, defaults plotter.XYs
			for _, pt := range points {
				if pt.scenario != sc || pt.family != f.name {
					continue
				}
				xy := plotter.XY{X: 100 * pt.result.ViolationRate, Y: math.Min(100*pt.result.Harvest, 150)}
				all = append(all, xy)
				if pt.isDefault {
					defaults = append(defaults, xy)
				}
			}
			scatter, err := plotter.NewScatter(all)
			if err != nil {
				return fmt.Errorf("plot %s %s: %w", sc, f.name, err)
			}
			scatter.GlyphStyle = draw.GlyphStyle{Color: f.color, Radius: vg.Points(2.5), Shape: f.shape}
			p.Add(scatter)
			if len(defaults) > 0 {
				def, err := plotter.NewScatter(defaults)
				if err != nil {
					return err
				}
				def.GlyphStyle = draw.GlyphStyle{Color: f.color, Radius: vg.Points(6), Shape: f.shape}
				p.Add(def)
			}
			if i == 0 {
				p.Legend.Add(f.name, scatter)
			}
		}
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = false, false
		if i == 0 {
			p.Legend.Add("goal: >= 75% at <= 1%", goal)
		}
		plots[i/cols][i%cols] = p
	}
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] == nil {
				plots[r][c] = plot.New()
				plots[r][c].HideAxes()
			}
		}
	}
	img := vgimg.New(vg.Length(cols)*4*vg.Inch, vg.Length(rows)*3.6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(8), PadY: vg.Points(8),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			plots[r][c].Draw(canvases[r][c])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write plot: %w", err)
	}
	return f.Close()
}

// sqrtScale spreads the low violation rates that matter (0-2%) while still
// showing the anchors' tens of percent.
type sqrtScale struct{}

func (sqrtScale) Normalize(lo, hi, x float64) float64 {
	return (math.Sqrt(math.Max(x, 0)) - math.Sqrt(lo)) / (math.Sqrt(hi) - math.Sqrt(lo))
}

// violationTicks marks the violation axis at rates worth reading.
var violationTicks = plot.ConstantTicks([]plot.Tick{
	{Value: 0, Label: "0"}, {Value: 0.25, Label: ".25"}, {Value: 1, Label: "1"}, {Value: 2, Label: "2"},
	{Value: 5, Label: "5"}, {Value: 10, Label: "10"}, {Value: 20, Label: "20"}, {Value: 40, Label: "40"},
})
