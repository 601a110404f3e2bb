package whatsappweb_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/whatsappweb"
)

func TestRegisteredWithTaggedKeys(t *testing.T) {
	typ, ok := channel.Lookup("whatsapp-web")
	if !ok {
		t.Fatalf("whatsapp-web is not registered: %v", channel.Types())
	}
	st := reflect.TypeOf(typ.Config()).Elem()
	keys := map[string]bool{}
	for i := range st.NumField() {
		f := st.Field(i)
		tag := f.Tag.Get("toml")
		if f.IsExported() && tag == "" {
			t.Errorf("config field %s has no toml tag", f.Name)
		}
		keys[tag] = true
	}
	for _, k := range []string{"id", "store", "session", "pair_phone", "groups", "durable_view_once"} {
		if !keys[k] {
			t.Errorf("no key %q", k)
		}
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		cfg  whatsappweb.Config
		key  string
		says string
	}{
		{whatsappweb.Config{}, "", ""},
		{whatsappweb.Config{Store: "postgres://bot:secret@db/bot"}, "", ""},
		{whatsappweb.Config{Session: "leader"}, "", ""},
		{whatsappweb.Config{Session: "data/wa.db"}, "session", `write store = "data/wa.db"`},
		{whatsappweb.Config{Session: "postgres://bot:secret@db/bot"}, "session", "key store now"},
		{whatsappweb.Config{Store: "mysql://bot:secret@db/bot"}, "store", "postgres://"},
		{whatsappweb.Config{Store: "wa.db?mode=memory"}, "store", "may not contain"},
		{whatsappweb.Config{PairPhone: "+1 (555) 000-1111"}, "", ""},
		{whatsappweb.Config{PairPhone: "0555 0001111"}, "pair_phone", "international format"},
		{whatsappweb.Config{PairPhone: "call me"}, "pair_phone", "international format"},
	}
	for _, tc := range cases {
		var got []string
		tc.cfg.Check(channel.Setting{ID: "wa", Dir: "/etc/bot"}, func(key, format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			got = append(got, key+": "+msg)
			if strings.Contains(msg, "secret") {
				t.Errorf("a problem shows the password: %s", msg)
			}
		})
		switch {
		case tc.key == "" && len(got) > 0:
			t.Errorf("%+v: %v", tc.cfg, got)
		case tc.key != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.key+": ") || !strings.Contains(got[0], tc.says)):
			t.Errorf("%+v: %v, want %s saying %q", tc.cfg, got, tc.key, tc.says)
		}
	}
}
