package main

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	guestsdk "github.com/botrun/botrun/guest-sdk"
	bot "github.com/botrun/botrun/guest-sdk/go"
)

//go:embed templates
var templates embed.FS

var langs = []string{"go", "rust", "c", "assemblyscript"}

var projectName = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

func cmdNew(args []string, stdout, stderr io.Writer) int {
	fs_ := flags("new", "Usage: botrun new --lang go|rust|c|assemblyscript DIR\n\nScaffolds a bot project in DIR that builds with make and runs with botrun bot.toml.", stderr)
	lang := fs_.String("lang", "go", "the handler's language: "+strings.Join(langs, ", "))
	pos, code, stop := parseInterleaved(fs_, args)
	if stop {
		return code
	}
	switch {
	case len(pos) == 0:
		fmt.Fprintf(stderr, "botrun new: the project's directory is missing: botrun new --lang %s my-bot\n", *lang)
		return 2
	case len(pos) > 1:
		fmt.Fprintf(stderr, "botrun new: one directory, not %d (%s)\n", len(pos), strings.Join(pos, " "))
		return 2
	}
	dir := pos[0]
	abs, err := filepath.Abs(dir)
	if err != nil {
		fmt.Fprintln(stderr, "botrun new:", err)
		return 1
	}
	name := filepath.Base(abs) // "." names the directory it is
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		fmt.Fprintf(stderr, "botrun new: %s is a file: pick a new directory\n", dir)
		return 1
	}
	if !projectName.MatchString(name) {
		fmt.Fprintf(stderr, "botrun new: %q: name the directory with lowercase letters, digits, '-' or '_'\n", name)
		return 2
	}
	found := false
	for _, l := range langs {
		found = found || l == *lang
	}
	if !found {
		fmt.Fprintf(stderr, "botrun new: --lang %q: want one of %s\n", *lang, strings.Join(langs, ", "))
		return 2
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		fmt.Fprintf(stderr, "botrun new: %s exists and is not empty: pick a new directory\n", dir)
		return 1
	}
	data := struct{ Name string }{name}
	write := func(src, dst string) error {
		b, err := templates.ReadFile(src)
		if err != nil {
			return err
		}
		t, err := template.New(src).Parse(string(b))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer f.Close()
		return t.Execute(f, data)
	}
	root := "templates/" + *lang
	err = fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")
		return write(p, filepath.Join(dir, rel))
	})
	for _, f := range []string{"bot.toml", "tests/echo.chat"} {
		if err == nil {
			err = write("templates/"+f+".tmpl", filepath.Join(dir, f))
		}
	}
	if err == nil {
		err = copySDK(*lang, filepath.Join(dir, "botrun-sdk"))
	}
	if err != nil {
		fmt.Fprintln(stderr, "botrun new:", err)
		return 1
	}
	fmt.Fprintf(stdout, "created %s (%s). Next:\n  cd %s && make && make test && botrun bot.toml\n", dir, *lang, dir)
	if _, err := exec.LookPath("botrun"); err != nil {
		fmt.Fprintf(stdout, "botrun is not on your PATH: run make install in the botrun checkout (or go install ./cmd/botrun there)\n")
	}
	return 0
}

// copySDK writes the guest SDK of lang into dir, from the sources built
// into this binary.
func copySDK(lang, dir string) error {
	var src fs.FS
	var root string
	switch lang {
	case "go":
		src, root = bot.Sources, "."
	case "c":
		src, root = guestsdk.Sources, "c"
	case "rust":
		src, root = guestsdk.Sources, "rust"
	case "assemblyscript":
		src, root = guestsdk.Sources, "assemblyscript"
	}
	return fs.WalkDir(src, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") || p == "sources.go" {
			return err
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
