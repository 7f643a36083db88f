"""hocket.sim"""
