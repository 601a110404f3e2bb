package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/botrun/botrun/internal/wasmbuild"
)

// checkDeployed runs "botrun check" on a config the deploy files run, as
// its container sees it: the image's paths (/app/bot.wasm, /data) point at
// the example module and a directory of the test, and env holds what the
// deploy file sets. Every ${VAR} the config reads must be in env.
func checkDeployed(t *testing.T, what, src string, env map[string]string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(src, -1) {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("%s reads ${%s}, which its deploy file does not set", what, m[1])
		}
		t.Setenv(m[1], env[m[1]])
	}
	module := wasmbuild.Go(t, "../../examples/echo")
	data := t.TempDir()
	src = strings.ReplaceAll(src, `"/app/bot.wasm"`, `"`+module+`"`)
	src = strings.ReplaceAll(src, `"/data`, `"`+data)
	cfg := filepath.Join(t.TempDir(), "bot.toml")
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCLI("check", cfg); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("botrun check on %s: exit %d\n%s%s", what, code, out, errs)
	}
}

var deployEnv = map[string]string{
	"DATABASE_URL":       "postgres://bot:pw@db:5432/bot?sslmode=disable",
	"BOTRUN_ADMIN_TOKEN": "a-long-random-admin-token-0123",
	"POD_NAME":           "botrun-7d9f8-abcde",
}

// TestDeployDocker: the Dockerfile runs botrun non-root on the config it
// copies, which botrun check accepts, with /data as the volume the config
// keeps its journals in.
func TestDeployDocker(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	for _, want := range []string{
		"COPY deploy/docker/bot.toml /app/bot.toml", `CMD ["/app/bot.toml"]`, `ENTRYPOINT ["/usr/local/bin/botrun"]`,
		"USER 65532:65532", "VOLUME /data", "go build -trimpath", "./cmd/botrun", "/out/bot.wasm",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile has no %q", want)
		}
	}
	src, err := os.ReadFile("../../deploy/docker/bot.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(`path = "/data/bot.db"`)) || !bytes.Contains(src, []byte(`module = "/app/bot.wasm"`)) {
		t.Errorf("deploy/docker/bot.toml does not keep its journal in the /data volume and run /app/bot.wasm:\n%s", src)
	}
	checkDeployed(t, "deploy/docker/bot.toml", string(src), deployEnv)
}

// TestDeployCompose: the compose file runs three replicas of the image on
// the config it mounts, with the environment that config reads, behind a
// healthy PostgreSQL; botrun check accepts that config.
func TestDeployCompose(t *testing.T) {
	b, err := os.ReadFile("../../deploy/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Build       struct{ Context string }
			Command     []string
			Environment map[string]string
			Volumes     []string
			Deploy      struct{ Replicas int }
			DependsOn   map[string]struct{ Condition string } `yaml:"depends_on"`
		}
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	bot, ok := c.Services["botrun"]
	if !ok || c.Services["db"].Volumes == nil {
		t.Fatalf("compose.yaml has no botrun and db services: %+v", c.Services)
	}
	if bot.Deploy.Replicas != 3 || bot.Build.Context != "../.." || bot.DependsOn["db"].Condition != "service_healthy" {
		t.Errorf("the botrun service: %+v", bot)
	}
	if len(bot.Command) != 1 || !slices.Contains(bot.Volumes, "./bot.toml:"+bot.Command[0]+":ro") {
		t.Fatalf("the botrun service runs %q but mounts %q", bot.Command, bot.Volumes)
	}
	src, err := os.ReadFile("../../deploy/compose/bot.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte("coordination = true")) || !bytes.Contains(src, []byte(`backend = "postgres"`)) {
		t.Errorf("deploy/compose/bot.toml is not coordinated replicas on PostgreSQL")
	}
	checkDeployed(t, "deploy/compose/bot.toml", string(src), bot.Environment)
}

// TestDeployKubernetes: the manifests parse; the Deployment runs the
// ConfigMap's config where it mounts it, probes /readyz and /healthz (which
// the bot serves), sets every variable the config reads from the secret or
// the pod, and runs non-root; botrun check accepts the config.
func TestDeployKubernetes(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/botrun.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet struct{ Path string } `yaml:"httpGet"`
	}
	var config string
	var dep struct {
		Spec struct {
			Replicas int
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
					} `yaml:"securityContext"`
					Containers []struct {
						Args []string
						Env  []struct {
							Name      string
							ValueFrom map[string]any `yaml:"valueFrom"`
						}
						ReadinessProbe probe `yaml:"readinessProbe"`
						LivenessProbe  probe `yaml:"livenessProbe"`
						VolumeMounts   []struct {
							Name      string
							MountPath string `yaml:"mountPath"`
						} `yaml:"volumeMounts"`
					}
				}
			}
		}
	}
	kinds := map[string]bool{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			break
		}
		var head struct {
			Kind string
			Data map[string]string
		}
		if err := doc.Decode(&head); err != nil {
			t.Fatal(err)
		}
		kinds[head.Kind] = true
		switch head.Kind {
		case "ConfigMap":
			config = head.Data["bot.toml"]
		case "Deployment":
			if err := doc.Decode(&dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !kinds["ConfigMap"] || !kinds["Deployment"] || !kinds["Service"] || config == "" {
		t.Fatalf("the manifests hold %v, want a ConfigMap with bot.toml, a Deployment and a Service", kinds)
	}
	spec := dep.Spec.Template.Spec
	if dep.Spec.Replicas < 2 || len(spec.Containers) != 1 || !spec.SecurityContext.RunAsNonRoot {
		t.Fatalf("the Deployment: %+v", dep.Spec)
	}
	c := spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes on %q and %q, want /readyz and /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "config" && len(c.Args) == 1 && c.Args[0] == m.MountPath+"/bot.toml")
	}
	if !mounted {
		t.Errorf("the container runs %q, which is not the mounted ConfigMap's bot.toml", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			t.Errorf("env %s is not from a secret or the pod", e.Name)
		}
		env[e.Name] = deployEnv[e.Name]
	}
	checkDeployed(t, "the ConfigMap's bot.toml", config, env)
}
