"""hocket.models"""
