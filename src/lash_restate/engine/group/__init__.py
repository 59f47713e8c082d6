"""`LashGroup`: the group object's handlers, the settlement-mode seam and the group's rank layouts."""
