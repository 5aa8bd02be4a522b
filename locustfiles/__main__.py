"""`python -m locustfiles` prints the folder of the locustfiles (the installed copy, or the checkout's)."""

from locustfiles import DIR

if __name__ == "__main__":
    print(DIR)
