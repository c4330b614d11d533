package nomarker

type Plain struct {
	Name string
}
