package firststage

import "time"

// parseRFC3339 parses an RFC 3339 timestamp with a zone ("Z" or ±hh:mm) and
// returns it in UTC. It accepts a subset of what time.Parse(time.RFC3339Nano)
// accepts (the fuzz test FuzzParseRFC3339 checks that every accepted input
// means the same instant to time.Parse) and does not allocate.
func parseRFC3339(b []byte) (time.Time, bool) {
	// YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)
	if len(b) < len("2006-01-02T15:04:05Z") {
		return time.Time{}, false
	}
	num := func(s []byte) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	i := 19
	nsec := 0
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if i-start < 9 {
				nsec = nsec*10 + int(b[i]-'0')
			} else {
				return time.Time{}, false // more than nanosecond precision
			}
			i++
		}
		digits := i - start
		if digits == 0 {
			return time.Time{}, false
		}
		for ; digits < 9; digits++ {
			nsec *= 10
		}
	}
	if i >= len(b) {
		return time.Time{}, false
	}
	offset := 0
	switch b[i] {
	case 'Z':
		i++
	case '+', '-':
		if len(b)-i != 6 || b[i+3] != ':' {
			return time.Time{}, false
		}
		oh, okh := num(b[i+1 : i+3])
		om, okm := num(b[i+4 : i+6])
		if !okh || !okm || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = (oh*60 + om) * 60
		if b[i] == '-' {
			offset = -offset
		}
		i += 6
	default:
		return time.Time{}, false
	}
	if i != len(b) {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
