package netnsutil

// SetSetns replaces the setns the thread switching uses, so a test can make
// moving a thread back fail; it returns the function that undoes it.
func SetSetns(f func(fd, nstype int) error) (undo func()) {
	old := setns
	setns = f
	return func() { setns = old }
}
