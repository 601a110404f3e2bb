module botrun.test/dryrunguests

go 1.26

require github.com/botrun/botrun/guest-sdk/go v0.0.0

replace github.com/botrun/botrun/guest-sdk/go => ../../../../guest-sdk/go
