package durability

// RecordCacheSize returns the bytes and records d's record cache holds.
func RecordCacheSize(d *KvDurability) (bytes int64, records int) { return d.cache.size() }
