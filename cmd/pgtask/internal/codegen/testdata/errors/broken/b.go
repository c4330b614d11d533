package broken

var y string = 2
