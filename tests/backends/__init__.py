"""The qai, snpe and aihub backends against their test doubles, and the doubles' contracts."""
