package main

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

//go:embed templates
var templates embed.FS

var langs = []string{"go", "rust", "c", "assemblyscript"}

var projectName = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// findSDK locates guest-sdk/ of the botrun checkout: beside the executable's
// directory (bin/botrun), or above the current directory.
func findSDK() (string, error) {
	var starts []string
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if st, err := os.Stat(filepath.Join(d, "guest-sdk", "go", "bot.go")); err == nil && !st.IsDir() {
				return filepath.Join(d, "guest-sdk"), nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("cannot find the guest SDKs (guest-sdk/ of a botrun checkout): pass --sdk DIR")
}

func cmdNew(args []string, stdout, stderr io.Writer) int {
	fs_ := flags("new", "Usage: botrun new --lang go|rust|c|assemblyscript DIR\n\nScaffolds a bot project in DIR that builds with make and runs with botrun bot.toml.", stderr)
	lang := fs_.String("lang", "go", "the handler's language: "+strings.Join(langs, ", "))
	sdk := fs_.String("sdk", "", "the guest-sdk directory of a botrun checkout (found automatically)")
	if code, stop := parse(fs_, args, 1); stop {
		return code
	}
	dir := fs_.Arg(0)
	name := filepath.Base(filepath.Clean(dir))
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
	if *sdk == "" {
		s, err := findSDK()
		if err != nil {
			fmt.Fprintln(stderr, "botrun new:", err)
			return 1
		}
		*sdk = s
	}
	abs, err := filepath.Abs(*sdk)
	if err != nil {
		fmt.Fprintln(stderr, "botrun new:", err)
		return 1
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		fmt.Fprintf(stderr, "botrun new: %s exists and is not empty\n", dir)
		return 1
	}
	// AssemblyScript imports only relative paths: the SDK as seen from
	// DIR/assembly.
	absDir, err := filepath.Abs(dir)
	if err != nil {
		fmt.Fprintln(stderr, "botrun new:", err)
		return 1
	}
	rel, err := filepath.Rel(filepath.Join(absDir, "assembly"), abs)
	if err != nil {
		fmt.Fprintln(stderr, "botrun new:", err)
		return 1
	}
	data := struct{ Name, SDK, SDKFromAssembly string }{name, abs, filepath.ToSlash(rel)}
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
	if err == nil {
		err = write("templates/bot.toml.tmpl", filepath.Join(dir, "bot.toml"))
	}
	if err != nil {
		fmt.Fprintln(stderr, "botrun new:", err)
		return 1
	}
	fmt.Fprintf(stdout, "created %s (%s). Next:\n  cd %s && make && botrun bot.toml\n", dir, *lang, dir)
	return 0
}
