package rates

import "github.com/pgtask/pgtask/runtime"

// CallPartner calls a partner's API, which allows 100 calls a minute per
// partner.
type CallPartner struct {
	runtime.Task `task:"call_partner,queue=outbound,rate=100/1m"`
	Partner      string `task:"rate"`
	Path         string `json:"path"`
}

// SendSMS sends at most 5 text messages a second, in bursts of at most 20,
// whoever they go to.
type SendSMS struct {
	runtime.Task `task:"send_sms,rate=5/1s,burst=20"`
	To           string `json:"to"`
}
