package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/botrun/botrun/host/convtest"
)

const testSynopsis = `usage: botrun test [-m bot.wasm] [--crash] [--json] [-run PATTERN] [-update] [FILE|DIR...]

Runs conversation tests (*.chat files; default: the directory tests) against
the module, with an in-memory journal and a test channel: no network, the
same result on every run. Exit 0 when every test passes, 1 on a failure
(its file:line and a diff of the expected and actual replies), 2 on bad
usage. The format is in docs/testing.md.`

// cmdTest is "botrun test".
func cmdTest(args []string, stdout, stderr io.Writer) int {
	fs := flags("botrun test", testSynopsis, stderr)
	module := fs.String("m", "bot.wasm", "the bot's module")
	crash := fs.Bool("crash", false, "also run each conversation with a crash at every journal write (replayed after each): fails on a reply lost, doubled or different")
	asJSON := fs.Bool("json", false, "print one JSON object per file")
	pattern := fs.String("run", "", "run only the files whose path matches this regular expression")
	update := fs.Bool("update", false, "rewrite the expected replies (and :state values) with the bot's")
	verbose := fs.Bool("v", false, "print what the bot logged (warnings and errors) for every file, not only for a failing one")
	paths, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	var match *regexp.Regexp
	if *pattern != "" {
		re, err := regexp.Compile(*pattern)
		if err != nil {
			fmt.Fprintf(stderr, "botrun test: -run %q: %v\n", *pattern, err)
			return 2
		}
		match = re
	}
	if len(paths) == 0 {
		paths = []string{"tests"}
	}
	files, err := testFiles(paths, match)
	if err != nil {
		fmt.Fprintf(stderr, "botrun test: %v\n", err)
		return 2
	}
	if len(files) == 0 {
		if match != nil {
			fmt.Fprintf(stderr, "botrun test: no *.chat file in %s matches -run %q\n", strings.Join(paths, ", "), *pattern)
		} else {
			fmt.Fprintf(stderr, "botrun test: no *.chat file in %s (write one: docs/testing.md)\n", strings.Join(paths, ", "))
		}
		return 2
	}
	// A file that does not parse is reported (exit 2); the others run.
	var scripts []*convtest.Script
	bad := 0
	for _, f := range files {
		s, err := convtest.ParseFile(f)
		if err != nil {
			bad++
			if *asJSON {
				json.NewEncoder(stdout).Encode(convtest.Result{File: f, Failures: []convtest.Failure{{File: f, Message: err.Error()}}})
			} else {
				fmt.Fprintf(stderr, "botrun test: %v\n", err)
			}
			continue
		}
		scripts = append(scripts, s)
	}
	cache := ""
	if dir, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(dir, "botrun", "wasm-cache")
	}
	ctx := context.Background()
	r, err := convtest.New(ctx, convtest.Options{Module: *module, CacheDir: cache, Crash: *crash})
	if err != nil {
		fmt.Fprintf(stderr, "botrun test: %s: %v\n", *module, err)
		return 2
	}
	defer r.Close()
	failed := 0
	start := time.Now()
	for _, s := range scripts {
		res := r.Run(ctx, s, *update)
		if !res.Passed {
			failed++
		}
		if *asJSON {
			json.NewEncoder(stdout).Encode(res)
			continue
		}
		switch {
		case !res.Passed:
			fmt.Fprintf(stdout, "FAIL %s (%s)\n", s.Path, res.Took.Round(time.Millisecond))
			for _, f := range res.Failures {
				fmt.Fprintf(stdout, "  %s\n", strings.ReplaceAll(f.Error(), "\n", "\n  "))
			}
			printLog(stdout, res.Log)
		case res.Updated:
			fmt.Fprintf(stdout, "updated %s\n", s.Path)
		default:
			crashes := ""
			if res.CrashRuns > 0 {
				crashes = fmt.Sprintf(", %d crash runs", res.CrashRuns)
			}
			fmt.Fprintf(stdout, "ok   %s (%d steps%s, %s)\n", s.Path, res.Steps, crashes, res.Took.Round(time.Millisecond))
			if *verbose {
				printLog(stdout, res.Log)
			}
		}
	}
	if !*asJSON {
		if failed > 0 {
			fmt.Fprintf(stdout, "FAIL: %d of %s (%s)\n", failed, fileCount(len(scripts)), time.Since(start).Round(time.Millisecond))
		} else {
			fmt.Fprintf(stdout, "PASS: %s (%s)\n", fileCount(len(scripts)), time.Since(start).Round(time.Millisecond))
		}
	}
	switch {
	case bad > 0:
		return 2
	case failed > 0:
		return 1
	}
	return 0
}

// fileCount is "1 file" or "n files".
func fileCount(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// printLog prints what the bot logged, indented, if anything.
func printLog(w io.Writer, log string) {
	if log = strings.TrimSpace(log); log != "" {
		fmt.Fprintf(w, "  the bot logged:\n    %s\n", strings.ReplaceAll(log, "\n", "\n    "))
	}
}

// parseInterleaved parses flags that may come before or after the
// positional arguments ("botrun test tests/ --crash").
func parseInterleaved(fs *flag.FlagSet, args []string) (rest []string, code int, stop bool) {
	for {
		if code, stop := parse(fs, args, -1); stop {
			return nil, code, true
		}
		if fs.NArg() == 0 {
			return rest, 0, false
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// testFiles are the *.chat files under paths (a file named is taken
// whatever its name), sorted, that match.
func testFiles(paths []string, match *regexp.Regexp) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[filepath.Clean(p)] {
			seen[filepath.Clean(p)] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err != nil && p == "tests" && len(paths) == 1:
			return nil, fmt.Errorf("no tests directory here: name the test files or directories (botrun test -m bot.wasm tests/)")
		case err != nil:
			return nil, err
		case st.IsDir():
		case !st.Mode().IsRegular():
			return nil, fmt.Errorf("%s is not a file", p)
		default:
			add(p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.HasSuffix(path, ".chat") {
				add(path)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	if match == nil {
		return out, nil
	}
	kept := out[:0]
	for _, f := range out {
		if match.MatchString(f) {
			kept = append(kept, f)
		}
	}
	return kept, nil
}
